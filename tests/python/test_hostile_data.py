# The Python module under hostile data: errors that keep their origin (traceback, type, the
# field or keyword they concern), conversions that would change a value, DLPack exports refused
# without leaking, and read-only arrays (np.frombuffer, np.memmap(mode="r")) taken as they are.
# Bodies that might crash or hang run in a child process with a time limit.
import io
import os
import subprocess
import sys
import tarfile
import textwrap
import traceback

import numpy as np
import pytest
from conftest import Indexed


def run_child(body, timeout=60):
    """Runs `body` in a fresh interpreter with ferry importable; returns (rc, stdout+stderr)."""
    code = "import numpy as np\nimport ferry\n" + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
    return proc.returncode, proc.stdout + proc.stderr


def first_error(ferry, dataset, **options):
    with pytest.raises(Exception) as info:
        for _ in ferry.Loader(dataset, batch_size=4, device="cpu", **options).epoch(0):
            pass
    return info.value


# ---- errors keep their origin ----------------------------------------------------------------


def decode_record(i):
    raise ValueError(f"record {i} is truncated")


class Decoding(Indexed):
    def __getitem__(self, i):
        if i == 6:
            decode_record(i)
        return super().__getitem__(i)


def test_a_python_datasets_exception_keeps_its_traceback(ferry):
    # On threads, the frames themselves (in worker processes, their text: test_pyworkers.py).
    e = first_error(ferry, Decoding(12), processes=0)
    assert isinstance(e, ValueError) and "record 6 is truncated" in str(e)
    names = [frame.name for frame in traceback.extract_tb(e.__traceback__)]
    assert "decode_record" in names and "__getitem__" in names
    # the frames where it was raised come after the consumer's own
    assert names.index("first_error") < names.index("__getitem__") < names.index("decode_record")


def test_a_kept_failure_does_not_keep_its_frames_locals(ferry):
    import gc
    import weakref

    class Big:
        pass

    held = []

    class Failing(Indexed):
        def __getitem__(self, i):
            if i % 3 == 1:
                decoded = Big()  # a local of the failing frame, as a decoded image would be
                held.append(weakref.ref(decoded))
                raise ValueError(f"sample {i} does not decode")
            return super().__getitem__(i)

    loader = ferry.Loader(Failing(60), batch_size=8, on_error="skip", device="cpu", processes=0)
    assert sum(b.size for b in loader.epoch(0)) == 40
    gc.collect()
    assert len(held) == 20 and all(r() is None for r in held)
    # and the traceback of a raised one still shows the line
    e = first_error(ferry, Failing(8), processes=0)
    assert "__getitem__" in [f.name for f in traceback.extract_tb(e.__traceback__)]


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.parametrize("bad_source", [0, 1])
def test_an_exception_in_a_mixtures_source_keeps_its_type(ferry, bad_source, processes):
    sources = [Indexed(10), Indexed(10)]
    sources[bad_source] = Indexed(10, bad={4}, error=LookupError)
    mix = ferry.Mixture([(s, 1.0) for s in sources])
    e = first_error(ferry, mix, processes=processes)
    assert type(e) is LookupError and "sample 4 is corrupt" in str(e)
    assert e.ferry_sample == 10 * bad_source + 4
    if processes == 0:  # the frames themselves
        names = [frame.name for frame in traceback.extract_tb(e.__traceback__)]
        assert "__getitem__" in names
    else:  # their text, from the worker process
        notes = "\n".join(e.__notes__)
        assert "in the worker process" in notes and "in __getitem__" in notes, notes


def test_an_exception_in_a_nested_mixture_keeps_its_type(ferry):
    inner = ferry.Mixture([(Indexed(6), 1.0), (Indexed(6, bad={2}, error=KeyError), 1.0)])
    e = first_error(ferry, ferry.Mixture([(Indexed(5), 5.0), (inner, 12.0)]))
    assert type(e) is KeyError and e.ferry_sample == 5 + 6 + 2


def test_skipped_mixture_failures_are_skipped(ferry):
    mix = ferry.Mixture([(Indexed(8), 1.0), (Indexed(8, bad={1}), 1.0)])
    loader = ferry.Loader(mix, batch_size=4, on_error="skip", device="cpu")
    seen = sorted(i for b in loader.epoch(0) for i in b.indices.tolist())
    assert seen == [i for i in range(16) if i != 9]


class Flags:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": np.arange(3, dtype=np.float32), "ok": np.array([True, False])}


def test_an_unsupported_dtype_of_a_python_dataset_names_the_field(ferry):
    with pytest.raises(ferry.ConfigError, match=r'field "ok" of sample 0 has dtype bool'):
        ferry.Loader(Flags(), device="cpu")


@pytest.mark.parametrize("bad", [np.zeros(4, dtype=bool), np.zeros(4, dtype=np.complex64),
                                 np.zeros(4, dtype="datetime64[s]")])
def test_an_unsupported_dtype_of_a_tensor_dataset_names_the_field(ferry, bad):
    with pytest.raises(Exception, match=r'TensorDataset: field "mask"'):
        ferry.TensorDataset({"x": np.zeros(4, dtype=np.float32), "mask": bad})


def test_an_unsupported_object_in_a_tensor_dataset_names_the_field(ferry):
    with pytest.raises(TypeError, match=r'TensorDataset: field "labels".*no __dlpack__'):
        ferry.TensorDataset({"x": np.zeros(4, dtype=np.float32), "labels": [1, 2, 3, 4]})


def test_wrong_arguments_name_the_keyword(ferry, tmp_path):
    tokens = tmp_path / "t.bin"
    np.arange(100, dtype=np.uint16).tofile(tokens)
    with pytest.raises(ferry.ConfigError, match=r"TokenDataset: dtype: .*bool"):
        ferry.TokenDataset(str(tokens), seq_len=4, dtype="bool")
    with pytest.raises(ferry.ConfigError, match=r"TokenDataset: raw_dtype: "):
        ferry.TokenDataset(str(tokens), seq_len=4, raw_dtype="u9")
    with pytest.raises(TypeError, match=r"TokenDataset: files is a path or a list of paths"):
        ferry.TokenDataset([str(tokens), 3], seq_len=4)
    with pytest.raises(ferry.ConfigError, match=r"Normalize: dtype: "):
        ferry.Normalize(dtype="bool")
    with pytest.raises(TypeError, match=r"Mixture: sources\[1\]'s weight is a number, not 'heavy'"):
        ferry.Mixture([(Indexed(3), 1.0), (Indexed(3), "heavy")])
    with pytest.raises(ferry.ConfigError, match=r"Mixture: sources\[0\] is a \(dataset, weight\)"):
        ferry.Mixture([Indexed(3)])
    # A negative count is a ValueError, signed options as unsigned ones (docs/PYTHON.md); workers
    # was ferry's ConfigError before.
    for key, least in (("workers", 0), ("prefetch", 1), ("device_buffers", 2)):
        with pytest.raises(ValueError, match=r"Loader: %s is an int >= %d, not -1" % (key, least)):
            ferry.Loader(Indexed(3), **{key: -1})
    with pytest.raises(ValueError, match=r"Loader: batch_size is an int >= 1, not -1"):
        ferry.Loader(Indexed(3), batch_size=-1)
    csv = tmp_path / "a.csv"
    csv.write_text("a,b,label\n1,2,0\n3,4,1\n")
    with pytest.raises(TypeError, match=r"CsvDataset: label is a column name or index, not 1.5"):
        ferry.CsvDataset(str(csv), label=1.5)
    with pytest.raises(TypeError, match=r"CsvDataset: features is None or a list of column"):
        ferry.CsvDataset(str(csv), features=5)
    with pytest.raises(TypeError, match=r"CsvDataset: categorical is None or a list of column"):
        ferry.CsvDataset(str(csv), categorical="a")
    with pytest.raises(TypeError, match=r"CsvDataset: features is a column name or index, not"):
        ferry.CsvDataset(str(csv), features=["a", 2.5])
    with pytest.raises(TypeError, match=r"CsvDataset: vocabulary is a CsvDataset or a dict"):
        ferry.CsvDataset(str(csv), categorical=["a"], vocabulary={"a": 3})
    t = ferry.from_dlpack(np.zeros(3, dtype=np.float32))
    with pytest.raises(ferry.ConfigError, match=r"Tensor.to: dtype: .*bool"):
        t.to(dtype="bool")
    with pytest.raises(ferry.ConfigError, match=r"Tensor.to: device .*: .*bool"):
        t.to("bool")
    with pytest.raises(ferry.ConfigError, match=r"Tensor.to: device: .*cuda:x"):
        t.to("cuda:x")
    with pytest.raises(ferry.ConfigError, match=r"ferry.empty: dtype: "):
        ferry.empty([2], dtype="bool")
    with pytest.raises(ferry.ConfigError, match=r"ferry.zeros: device: .*tpu"):
        ferry.zeros([2], device="tpu")
    with pytest.raises(TypeError, match=r"__dlpack__: stream is None or an int"):
        t.__dlpack__(stream="s")
    # a type pybind11 refuses: named with what the keyword takes (python/ferry/_arguments.py)
    with pytest.raises(TypeError, match=r"^TokenDataset: seq_len is an int, not 'long' \(str\)$"):
        ferry.TokenDataset(str(tokens), seq_len="long")


# ---- a worker's Python thread state --------------------------------------------------------------


def test_a_worker_keeps_its_python_thread_state_between_reads(ferry):
    # threading.local lives in the thread state: a worker that kept none between reads (making
    # one per sample, the cost of a Python dataset's read) would see a fresh one at every read.
    import threading

    made = []
    threads = set()

    class PerWorker(Indexed):
        local = threading.local()

        def __getitem__(self, i):
            threads.add(threading.get_ident())
            if not hasattr(self.local, "handle"):
                self.local.handle = i
                made.append(i)
            return super().__getitem__(i)

    loader = ferry.Loader(PerWorker(400), batch_size=16, workers=2, autotune=False, device="cpu")
    seen = [i for b in loader.epoch(0) for i in b.indices.tolist()]
    assert seen == list(range(400))
    assert len(made) == len(threads), f"{len(made)} thread states on {len(threads)} threads"


# ---- conversions that change a value -----------------------------------------------------------


class Values:
    """Sample 0 sets the fields' dtypes (u8 [2], i64 [], f32 []); sample i's values come from
    `later[i]` when given."""

    def __init__(self, n, later):
        self.n = n
        self.later = later

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        sample = {"x": np.array([i, 1], dtype=np.uint8), "y": np.int64(i), "z": np.float32(i)}
        sample.update(self.later.get(i, {}))
        return sample


@pytest.mark.parametrize("field,value", [("x", [300, 1]), ("x", [-1, 1]), ("y", 3.7),
                                         ("y", 2.0 ** 70), ("z", 1e300), ("x", [1.5, 1])])
def test_a_conversion_that_changes_a_value_is_an_error_naming_sample_and_field(
        ferry, field, value):
    e = first_error(ferry, Values(8, {5: {field: value}}))
    assert isinstance(e, ferry.DataError)
    assert "Loader: sample 5" in str(e) and f'field "{field}" of sample 5' in str(e)
    assert "does not fit" in str(e)


@pytest.mark.parametrize("field,value", [("x", ["a", "b"]), ("z", "many"), ("y", object())])
def test_a_value_that_cannot_be_converted_is_an_error_naming_sample_and_field(
        ferry, field, value):
    e = first_error(ferry, Values(8, {3: {field: value}}))
    assert isinstance(e, ferry.DataError)
    assert "Loader: sample 3" in str(e) and f'field "{field}" of sample 3' in str(e)
    assert "cannot be converted" in str(e)


def test_a_changing_conversion_is_skipped_under_skip(ferry):
    loader = ferry.Loader(Values(8, {2: {"x": [256, 0]}, 6: {"y": -0.5}}), batch_size=4,
                          on_error="skip", device="cpu")
    seen = []
    for b in loader.epoch(0):
        seen.extend(b.indices.tolist())
        np.testing.assert_array_equal(b["x"].numpy()[:, 0], b.indices)
    assert seen == [0, 1, 3, 4, 5, 7]
    assert loader.stats().skipped == 2


def test_a_conversion_that_keeps_every_value_is_done(ferry):
    later = {1: {"z": 3, "y": np.int32(-7), "x": np.array([7, 255], dtype=np.int64)},
             2: {"z": 0.1, "y": 5.0, "x": [2, 0]}, 3: {"z": float("nan")}}
    b = next(iter(ferry.Loader(Values(4, later), batch_size=4, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["x"].numpy(), [[0, 1], [7, 255], [2, 0], [3, 1]])
    np.testing.assert_array_equal(b["y"].numpy(), [0, -7, 5, 3])
    z = b["z"].numpy()
    assert z.dtype == np.float32 and z[1] == 3.0 and z[2] == np.float32(0.1)
    assert np.isnan(z[3])


# ---- DLPack export ---------------------------------------------------------------------------


def test_a_refused_dlpack_export_raises_and_leaks_nothing():
    rc, out = run_child("""
        t = ferry.from_dlpack(np.ones(1 << 20, dtype=np.float32))   # 4 MiB
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096
        for bad in ["1.0", (1,), (1, "0"), 1, (None, None)]:
            try:
                t.__dlpack__(max_version=bad)
            except TypeError as e:
                assert "max_version" in str(e), e
            else:
                raise SystemExit(f"max_version={bad!r} was taken")
        for bad in [dict(copy="yes"), dict(dl_device=(1,)), dict(dl_device=(2, 0), copy=False)]:
            try:
                t.__dlpack__(**bad)
            except (TypeError, BufferError):
                pass
            else:
                raise SystemExit(f"{bad} was taken")
        before = rss()
        for _ in range(100):
            for bad in [(1,), "x", (1, 0, 0)]:
                try:  # a copy (4 MiB) asked for, and a max_version refused
                    t.__dlpack__(max_version=bad, copy=True)
                except TypeError:
                    pass
        grown = rss() - before
        assert grown < (32 << 20), f"RSS grew by {grown >> 20} MiB"
        # nor is the exported tensor's storage kept: the array goes with the last reference
        import gc, weakref
        a = np.ones(1 << 20, dtype=np.float32)
        t = ferry.from_dlpack(a)
        for bad in ["x", (None, None)]:
            try:
                t.__dlpack__(max_version=bad)
            except TypeError:
                pass
        gone = weakref.ref(a)
        del a, t
        gc.collect()
        assert gone() is None, "the array is still referenced"
        print("ok")
    """)
    assert rc == 0 and "ok" in out, out


# ---- read-only arrays --------------------------------------------------------------------------


def delivered(ferry, ds, batch_size=7, **options):
    out = {}
    for b in ferry.Loader(ds, batch_size=batch_size, device="cpu", **options).epoch(0):
        for name in b.keys():
            out.setdefault(name, []).append((b.indices.copy(), b[name].numpy().copy()))
    return out


def test_a_tensor_dataset_from_frombuffer_delivers_its_bytes_in_order(ferry):
    raw = bytes(range(256)) * 3  # immutable: the array is read-only
    x = np.frombuffer(raw, dtype=np.uint8).reshape(64, 12)
    y = np.frombuffer(np.arange(64, dtype=np.int64).tobytes(), dtype=np.int64)
    assert not x.flags.writeable and not y.flags.writeable
    ds = ferry.TensorDataset({"x": x, "y": y})
    assert ds.fields == [("x", "u8", (12,)), ("y", "i64", ())]
    got = delivered(ferry, ds, shuffle=True, seed=3)
    seen = []
    for idx, rows in got["x"]:
        np.testing.assert_array_equal(rows, x[idx])
        seen.extend(idx.tolist())
    for idx, rows in got["y"]:
        np.testing.assert_array_equal(rows, idx)
    assert sorted(seen) == list(range(64))
    # no copy: the dataset's tensor views the bytes object's memory
    t = ds.tensors[0]
    assert t.numpy().__array_interface__["data"][0] == x.__array_interface__["data"][0]


def test_a_tensor_dataset_from_a_read_only_memmap_delivers_its_bytes_in_order(ferry, tmp_path):
    path = tmp_path / "rows.f32"
    values = np.arange(50 * 6, dtype=np.float32).reshape(50, 6) * 0.5
    values.tofile(path)
    mm = np.memmap(path, dtype=np.float32, mode="r", shape=(50, 6))
    labels = np.memmap(path, dtype=np.int32, mode="r", shape=(50,), offset=0)
    ds = ferry.TensorDataset({"v": mm, "l": labels})
    del mm, labels  # the dataset keeps them
    got = delivered(ferry, ds, batch_size=8)
    assert [i for idx, _ in got["v"] for i in idx.tolist()] == list(range(50))
    for idx, rows in got["v"]:
        np.testing.assert_array_equal(rows, values[idx])
    for idx, rows in got["l"]:
        np.testing.assert_array_equal(rows, values.reshape(-1).view(np.int32)[idx])


def test_read_only_arrays_convert_without_a_copy_and_stay_read_only(ferry):
    base = np.arange(24, dtype=np.int32).tobytes()
    a = np.frombuffer(base, dtype=np.int32).reshape(4, 6)
    t = ferry.from_dlpack(a)
    assert t.shape == (4, 6) and t.dtype == "i32"
    view = t.numpy()
    assert view.__array_interface__["data"][0] == a.__array_interface__["data"][0]
    np.testing.assert_array_equal(view, np.arange(24).reshape(4, 6))
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 5
    # a DLPack export that cannot say "read-only" is refused; a copy is writable
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__()
    assert t.__dlpack__(max_version=(1, 0)) is not None
    assert t.clone().numpy().flags.writeable
    # a non-native byte order, a non-number, strides across items are refused, not misread
    with pytest.raises(BufferError, match="byte order"):
        ferry.from_dlpack(np.frombuffer(base, dtype=">i4"))
    with pytest.raises(BufferError, match="ferry takes numbers"):
        ferry.from_dlpack(np.frombuffer(base, dtype=[("a", "u1"), ("b", "u1")]))
    with pytest.raises(ferry.ConfigError, match="contiguous"):
        ferry.from_dlpack(a[:, ::2])
    with pytest.raises(BufferError, match="whole items"):
        ferry.from_dlpack(np.lib.stride_tricks.as_strided(
            np.frombuffer(base, dtype=np.uint16), shape=(5,), strides=(3,)))


def test_the_versioned_export_of_a_read_only_tensor_carries_the_read_only_flag(ferry):
    import ctypes

    t = ferry.from_dlpack(np.frombuffer(bytes(16), dtype=np.uint8))
    capsule = t.__dlpack__(max_version=(1, 0))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    pointer = get(capsule, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(pointer + 24).value  # after version, ctx, deleter
    assert flags & 1  # DLPACK_FLAG_BITMASK_READ_ONLY
    writable = ferry.from_dlpack(np.zeros(16, dtype=np.uint8)).__dlpack__(max_version=(1, 0))
    assert ctypes.c_uint64.from_address(get(writable, b"dltensor_versioned") + 24).value & 1 == 0


def test_writing_into_a_read_only_memmap_through_ferry_is_refused(tmp_path):
    path = tmp_path / "ro.bin"
    np.arange(4096, dtype=np.uint8).tofile(path)
    rc, out = run_child(f"""
        mm = np.memmap({str(path)!r}, dtype=np.uint8, mode="r")
        ds = ferry.TensorDataset({{"x": mm.reshape(64, 64)}})
        view = ds.tensors[0].numpy()
        try:
            view[0, 0] = 1   # a write into PROT_READ memory would crash here
        except ValueError:
            print("refused")
    """)
    assert rc == 0 and "refused" in out, out


# ---- names that are not UTF-8 -----------------------------------------------------------------


def test_file_and_class_names_that_are_not_utf8_reach_python(ferry, tmp_path):
    # Linux names are bytes: a class folder and a file in Latin-1. Class names come back as
    # os.fsdecode spells them (they reach the folder again), messages name the file with \xNN,
    # and a skip reason is text: nothing arrives empty or as a UnicodeDecodeError.
    root = os.fsencode(tmp_path) + b"/imgs"
    good, bad = root + b"/caf\xe9", root + b"/ok"
    os.makedirs(good)
    os.makedirs(bad)
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
        "3a7e9b550000000a49444154789c63600000000200015c4f4b9e0000000049454e44ae426082")
    with open(good + b"/a.png", "wb") as f:
        f.write(png)
    with open(bad + b"/broken\xff.png", "wb") as f:
        f.write(b"not an image at all")
    ds = ferry.ImageFolder(os.fsdecode(root), height=1, width=1, channels=1)
    assert ds.classes == ["caf\udce9", "ok"]
    assert os.path.isdir(os.path.join(os.fsdecode(root), ds.classes[0]))
    with pytest.raises(ferry.DataError) as info:
        for _ in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0):
            pass
    assert "broken\\xff.png" in str(info.value), str(info.value)
    loader = ferry.Loader(ds, batch_size=1, device="cpu", on_error="skip")
    got = [int(y) for b in loader.epoch(0) for y in b["label"].numpy()]
    assert got == [0]
    reasons = loader.stats().skip_reasons
    assert len(reasons) == 1 and "broken\\xff.png" in reasons[0], reasons


def test_sample_and_length_take_any_int_and_say_what_is_wrong(ferry, tmp_path):
    # An index beyond int64, a negative epoch or seed: pybind11's generic "incompatible function
    # arguments" TypeError before; now an IndexError or a ValueError that says what is taken.
    tokens = tmp_path / "t.bin"
    np.arange(40, dtype=np.uint16).tofile(tokens)
    ds = ferry.TokenDataset(str(tokens), seq_len=4)
    n = len(ds)
    for index in (10**20, -(10**20), n, -n - 1):
        with pytest.raises(IndexError, match=r"Dataset: index %d is out of range \(%d samples\)" % (index, n)):
            ds.sample(index)
    with pytest.raises(TypeError, match=r"Dataset: an index is an int, not 1.5"):
        ds.sample(1.5)
    for key in ("epoch", "seed"):
        with pytest.raises(ValueError, match=r"Dataset.sample: %s is an int >= 0, not -1" % key):
            ds.sample(0, **{key: -1})
        with pytest.raises(ValueError, match=r"Dataset.sample: %s is an int below 2\^64, not %d" % (key, 2**64)):
            ds.sample(0, **{key: 2**64})
        with pytest.raises(TypeError, match=r"Dataset.sample: %s is an int, not '1'" % key):
            ds.sample(0, **{key: "1"})
    # What is taken reads as before: the last sample by -1, the greatest epoch and seed.
    np.testing.assert_array_equal(ds.sample(-1)["input"], ds.sample(n - 1)["input"])
    assert set(ds.sample(0, epoch=2**64 - 1, seed=2**64 - 1)) == set(ds.sample(0))
    # length(): the same indices, on a dataset with a ragged field (a shard of texts).
    shard = tmp_path / "a.tar"
    with tarfile.open(shard, "w") as tar:
        for key, text in (("s0", b"abc"), ("s1", b"defgh")):
            info = tarfile.TarInfo(key + ".txt")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    texts = ferry.WebDataset([shard])
    assert [texts.length(i, "txt") for i in (0, 1, -1, -2)] == [3, 5, 5, 3]
    for index in (2, -3, 10**20):
        with pytest.raises(IndexError, match=r"Dataset: index %d is out of range \(2 samples\)" % index):
            texts.length(index, "txt")
    with pytest.raises(TypeError, match=r"Dataset: an index is an int, not '0'"):
        texts.length("0", "txt")


def test_a_negative_count_of_a_folder_is_a_value_error(ferry, tmp_path):
    # docs/PYTHON.md: a negative count is a ValueError; these were ferry's ConfigErrors.
    (tmp_path / "a").mkdir()
    for cls, key, least in ((ferry.AudioFolder, "channels", 0), (ferry.AudioFolder, "sample_rate", 0),
                            (ferry.ImageFolder, "height", 1), (ferry.ImageFolder, "width", 1),
                            (ferry.VideoFolder, "frames", 1), (ferry.VideoFolder, "stride", 1)):
        with pytest.raises(ValueError, match=r"%s: %s is an int >= %d, not -1$" % (cls.__name__, key, least)):
            cls(str(tmp_path), **{key: -1})


def test_a_negative_count_in_audio_options_is_a_value_error(ferry, tmp_path):
    (tmp_path / "a").mkdir()
    for mel, least in ((dict(n_mels=-1), 1), (dict(n_fft=-2), 2), (dict(hop=-1), 1)):
        key = next(iter(mel))
        with pytest.raises(ValueError, match=r"AudioFolder: mel\['%s'\] is an int >= %d, not -" % (key, least)):
            ferry.AudioFolder(str(tmp_path), mel=mel)
    with pytest.raises(ValueError, match=r"WebDataset: audio\['channels'\] is an int >= 0, not -1"):
        ferry.WebDataset([str(tmp_path / "x.tar")], audio=dict(channels=-1))
