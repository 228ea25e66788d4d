# ds[i] and ds.sample(i, seed=, epoch=) on ferry's own datasets: the sample the Loader delivers
# at index i (values, dtypes, shapes), IndexError past the end, negative indices, errors.
import numpy as np
import pytest


def loader_samples(ferry, ds, seed=0, epoch=0):
    """Each sample as a batch of one delivers it, in index order: {field: numpy array}."""
    loader = ferry.Loader(ds, batch_size=1, shuffle=False, seed=seed, device="cpu")
    return [{name: b[name].numpy()[0].copy() for name in b.keys()} for b in loader.epoch(epoch)]


def assert_same(got, want):
    assert list(got) == list(want)
    for name in want:
        assert isinstance(got[name], np.ndarray), name
        assert got[name].dtype == want[name].dtype, name
        assert got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name])


def test_tensor_dataset_items_are_the_loaders_samples(ferry):
    x = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    y = np.arange(5, dtype=np.int64) * 10
    ds = ferry.TensorDataset({"x": x, "y": y})
    delivered = loader_samples(ferry, ds)
    for i in range(5):
        assert_same(ds[i], delivered[i])
    assert ds[1]["y"].shape == () and ds[1]["y"] == 10
    assert_same(ds[-1], delivered[4])
    assert_same(ds[-5], delivered[0])
    for bad in (5, -6, 100):
        with pytest.raises(IndexError, match=rf"index {bad} is out of range \(5 samples\)"):
            ds[bad]
    with pytest.raises(IndexError, match=r"index 18446744073709551616 is out of range"):
        ds[2**64]
    assert_same(ds[np.int64(3)], delivered[3])
    with pytest.raises(TypeError, match=r"^Dataset: an index is an int, not 'x' \(str\); "
                                        r"ds\[i\]\['x'\] is sample i's field$"):
        ds["x"]
    with pytest.raises(TypeError, match=r"^Dataset: an index is an int, not slice\(1, 2, None\)"):
        ds[1:2]
    # The sequence protocol: iteration stops at the IndexError.
    items = list(ds)
    assert len(items) == 5
    np.testing.assert_array_equal(items[2]["x"], x[2])


def test_csv_dataset_items_are_the_loaders_samples(ferry, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("a,city,b,label\n1,rome,2,x\n3,oslo,4.5,y\n5,rome,6,x\n")
    ds = ferry.CsvDataset(csv, categorical=["city"])
    delivered = loader_samples(ferry, ds)
    assert len(delivered) == 3
    for i in range(3):
        assert_same(ds[i], delivered[i])
    np.testing.assert_array_equal(ds[1]["features"], np.array([3, 4.5], dtype=np.float32))
    assert ds[1]["label"].dtype == np.int64 and ds[1]["label"] == 1
    assert ds[-1]["city"] == ds.categories("city").index("rome")
    with pytest.raises(IndexError):
        ds[3]


def write_images(root, pil):
    rng = np.random.default_rng(3)
    for k, cls in enumerate(["cat", "dog"]):
        (root / cls).mkdir(parents=True)
        for j in range(3):
            pixels = rng.integers(0, 256, (20 + 4 * j, 16 + 3 * k, 3), dtype=np.uint8)
            pil.fromarray(pixels).save(root / cls / f"{j}.png")


def test_image_folder_items_are_the_loaders_samples_with_their_augmentations(ferry, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    write_images(tmp_path / "images", pil)
    plain = ferry.ImageFolder(tmp_path / "images", height=8, width=6)
    delivered = loader_samples(ferry, plain)
    for i in range(len(plain)):
        assert_same(plain[i], delivered[i])
    assert plain[0]["image"].dtype == np.uint8 and plain[0]["image"].shape == (8, 6, 3)
    assert plain[4]["label"] == 1
    # Random crops and flips drawn from the loader's per-sample seed (seed, epoch, index), and
    # the normalize the loader applies after the read: f32 [C, H, W].
    augmented = ferry.ImageFolder(tmp_path / "images", height=8, width=6,
                                  geometry="random_resized_crop", random_flip=True,
                                  normalize=ferry.Normalize(mean=[0.5], std=[0.25]))
    for seed, epoch in ((0, 0), (7, 3)):
        delivered = loader_samples(ferry, augmented, seed=seed, epoch=epoch)
        for i in range(len(augmented)):
            assert_same(augmented.sample(i, seed=seed, epoch=epoch), delivered[i])
    assert augmented[2]["image"].dtype == np.float32
    assert augmented[2]["image"].shape == (3, 8, 6)
    draws = [augmented.sample(2, seed=s)["image"] for s in range(4)]
    assert any(not np.array_equal(draws[0], d) for d in draws[1:])


def test_a_bad_file_is_a_data_error_naming_it(ferry, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    write_images(tmp_path / "images", pil)
    (tmp_path / "images" / "dog" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    ds = ferry.ImageFolder(tmp_path / "images", height=8, width=6)
    with pytest.raises(ferry.DataError, match=r"^sample 4: .*dog/1\.png"):
        ds[4]
    assert ds[3]["label"] == 1
