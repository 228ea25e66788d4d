# A constructor call that pybind11 refuses raises an error naming the argument at fault and what
# it takes (python/ferry/_arguments.py), not pybind11's whole signature.
import numpy as np
import pytest


@pytest.fixture
def ds(ferry):
    return ferry.TensorDataset({"x": np.arange(10, dtype=np.float32)})


def raised(kind, call):
    with pytest.raises(kind) as info:
        call()
    text = str(info.value)
    assert "incompatible constructor arguments" not in text, text
    assert "Invoked with" not in text, text
    return text


def test_an_option_given_by_position_says_to_name_it(ferry, ds):
    text = raised(TypeError, lambda: ferry.Loader(ds, 32))
    assert text.startswith("Loader: takes 1 positional argument (dataset)"), text
    assert "Loader(dataset, batch_size=32)" in text, text


def test_torch_keywords_say_what_ferry_takes(ferry, ds):
    text = raised(TypeError, lambda: ferry.Loader(ds, num_workers=2))
    assert text.startswith("Loader: no keyword num_workers; use workers="), text
    assert "processes=" in text and "ferry.torch.DataLoader" in text, text
    text = raised(TypeError, lambda: ferry.Loader(ds, prefetch_factor=2))
    assert "no keyword prefetch_factor; use prefetch=" in text, text


def test_a_misspelt_keyword_gets_the_close_ones(ferry, ds):
    text = raised(TypeError, lambda: ferry.Loader(ds, bacth_size=3))
    assert "Loader: no keyword bacth_size; did you mean batch_size=" in text, text


def test_a_wrong_type_names_the_keyword_and_the_type_it_takes(ferry, ds):
    text = raised(TypeError, lambda: ferry.Loader(ds, shuffle="yes"))
    assert text == "Loader: shuffle is True or False, not 'yes' (str)", text
    text = raised(TypeError, lambda: ferry.Loader(ds, batch_size=2.5))
    assert text == "Loader: batch_size is an int, not 2.5 (float)", text
    text = raised(TypeError, lambda: ferry.Loader(ds, timeout="1"))
    assert text == "Loader: timeout is a number, not '1' (str)", text
    text = raised(TypeError, lambda: ferry.Normalize(mean="0.5"))
    assert text.startswith("Normalize: mean is a list of numbers, not '0.5'"), text


def test_a_negative_count_is_a_value_error_naming_the_least(ferry, ds):
    text = raised(ValueError, lambda: ferry.Loader(ds, batch_size=-1))
    assert text == "Loader: batch_size is an int >= 1, not -1", text
    text = raised(ValueError, lambda: ferry.Loader(ds, seed=-5))
    assert text == "Loader: seed is an int >= 0, not -5", text


def test_image_keywords_of_torchvision(ferry, tmp_path):
    text = raised(TypeError, lambda: ferry.ImageFolder(tmp_path, size=64))
    assert text.startswith("ImageFolder: no keyword size; use height= and width="), text
    text = raised(TypeError, lambda: ferry.ImageFolder(tmp_path, transform=None))
    assert "random_resized_crop" in text, text
    text = raised(TypeError, lambda: ferry.ImageFolder(123))
    assert text == "ImageFolder: root is a path (a str or an os.PathLike), not 123 (int)", text
    text = raised(TypeError, lambda: ferry.ImageFolder(tmp_path, 64))
    assert "ImageFolder(root, height=64)" in text, text


def test_a_missing_argument_is_named(ferry):
    text = raised(TypeError, lambda: ferry.IdxDataset("images.gz"))
    assert text == "IdxDataset: labels is missing (a path (a str or an os.PathLike))", text


def test_calls_that_fit_are_unchanged(ferry, ds):
    loader = ferry.Loader(ds, batch_size=4, shuffle=True, device="cpu")
    assert type(loader) is ferry.Loader and ferry.Loader is ferry._ferry.Loader
    assert sum(len(b["x"]) for b in loader.epoch(0)) == 10
    # A value ferry itself checks is ferry's error, as before.
    with pytest.raises(ferry.ConfigError, match='on_error is "raise" or "skip", not "maybe"'):
        ferry.Loader(ds, on_error="maybe")
    assert "batch_size: int = 32" in ferry.Loader.__init__.__doc__
