# ferry.Loader from Python: which samples arrive, in which order, with which bytes; Python
# datasets and their errors; resume; stats; teardown; threads; Ctrl-C; memory.
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import Indexed, expected_x


def indices_of(epoch):
    return [list(b.indices) for b in epoch]


def test_tensor_dataset_batches_in_order(ferry):
    x = np.arange(100 * 3, dtype=np.float32).reshape(100, 3)
    y = np.arange(100, dtype=np.int64) * 10
    ds = ferry.TensorDataset({"x": x, "y": y})
    assert len(ds) == 100 and ds.fields == [("x", "f32", (3,)), ("y", "i64", ())]
    loader = ferry.Loader(ds, batch_size=32, device="cpu")
    assert len(loader) == 4
    ep = loader.epoch(0)
    assert len(ep) == 4
    seen = []
    for b in ep:
        assert list(b.keys()) == ["x", "y"] and len(b) == 2 and "x" in b and "q" not in b
        idx = b.indices
        assert idx.dtype == np.int64 and b.size == len(idx)
        np.testing.assert_array_equal(b["x"].numpy(), x[idx])
        np.testing.assert_array_equal(np.from_dlpack(b["y"]), y[idx])
        seen.extend(idx.tolist())
    assert seen == list(range(100))


def test_shuffle_is_deterministic_and_a_permutation(ferry):
    ds = ferry.TensorDataset({"i": np.arange(257, dtype=np.int64)})
    a = ferry.Loader(ds, batch_size=16, shuffle=True, seed=5, workers=1, device="cpu")
    b = ferry.Loader(ds, batch_size=16, shuffle=True, seed=5, workers=2, prefetch=2, device="cpu")
    ea, eb = indices_of(a.epoch(3)), indices_of(b.epoch(3))
    assert ea == eb
    flat = [i for batch in ea for i in batch]
    assert sorted(flat) == list(range(257)) and flat != list(range(257))
    assert indices_of(a.epoch(4)) != ea


def test_python_dataset_on_worker_threads(ferry):
    ds = Indexed(103)
    loader = ferry.Loader(ds, batch_size=10, shuffle=True, seed=1, workers=2, device="cpu")
    seen = []
    for b in loader.epoch(0):
        idx = b.indices
        np.testing.assert_array_equal(b["y"].numpy(), idx)
        for row, i in zip(b["x"].numpy(), idx):
            np.testing.assert_array_equal(row, expected_x(i))
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(103))
    assert loader.stats().samples == 103


def test_a_python_datasets_exception_keeps_its_type_and_names_the_sample(ferry):
    loader = ferry.Loader(Indexed(40, bad={17}, error=KeyError), batch_size=8, device="cpu")
    got = []
    with pytest.raises(KeyError) as info:
        for b in loader.epoch(0):
            got.extend(b.indices.tolist())
    assert got == list(range(16))  # the batches before the failing one arrived
    assert "sample 17 is corrupt" in str(info.value)
    assert info.value.ferry_sample == 17
    assert any("Loader: sample 17" in n for n in info.value.__notes__)
    # and the loader goes on
    assert [i for b in indices_of(ferry.Loader(Indexed(5), batch_size=2, device="cpu").epoch(0))
            for i in b] == list(range(5))


def test_skip_leaves_failing_samples_out_and_counts_them(ferry):
    loader = ferry.Loader(Indexed(30, bad={3, 29}), batch_size=8, on_error="skip", device="cpu")
    seen = [i for b in indices_of(loader.epoch(0)) for i in b]
    assert seen == [i for i in range(30) if i not in (3, 29)]
    s = loader.stats()
    assert s.skipped == 2 and any("ValueError: sample 3 is corrupt" in r for r in s.skip_reasons)


def test_python_dataset_errors_at_construction(ferry):
    class Empty:
        def __len__(self):
            return 0

        def __getitem__(self, i):
            raise IndexError

    with pytest.raises(ferry.ConfigError, match="empty"):
        ferry.Loader(Empty(), device="cpu")

    class NotADict(Empty):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return "12"  # a str is a sequence, but not a sample

    with pytest.raises(ferry.ConfigError, match="not a dict"):
        ferry.Loader(NotADict(), device="cpu")
    with pytest.raises(TypeError):
        ferry.Loader(42, device="cpu")


def test_a_sample_of_another_shape_is_an_error_naming_it(ferry):
    class Ragged(Indexed):
        def __getitem__(self, i):
            return {"x": np.zeros(3 if i != 6 else 4, np.float32)}

    with pytest.raises(ferry.DataError, match=r'field "x" of sample 6 has shape \(4,\)'):
        for _ in ferry.Loader(Ragged(10), batch_size=4, device="cpu").epoch(0):
            pass


def test_options_and_their_errors(ferry):
    ds = ferry.TensorDataset({"i": np.arange(10, dtype=np.int64)})
    with pytest.raises(ferry.ConfigError):
        ferry.Loader(ds, batch_size=0, device="cpu")
    with pytest.raises(ferry.ConfigError, match="on_error"):
        ferry.Loader(ds, on_error="ignore", device="cpu")
    with pytest.raises(TypeError):
        ferry.Loader(ds, num_workers=2)
    l = ferry.Loader(ds, batch_size=4, drop_last=True, rank=1, world_size=2, device="cpu")
    assert len(l) == 1 and indices_of(l.epoch(0)) == [[1, 3, 5, 7]]
    assert ferry.Loader(ds).device == ferry.Device.best()


def test_from_env_reads_the_launcher(ferry, monkeypatch):
    ds = ferry.TensorDataset({"i": np.arange(10, dtype=np.int64)})
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    l = ferry.Loader(ds, batch_size=5, from_env=True, device="cpu")
    assert indices_of(l.epoch(0)) == [[1, 3, 5, 7, 9]]
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ferry.ConfigError, match="RANK"):
        ferry.Loader(ds, from_env=True)


def test_state_and_resume_continue_exactly(ferry):
    ds = ferry.TensorDataset({"i": np.arange(100, dtype=np.int64)})
    opts = dict(batch_size=8, shuffle=True, seed=9, device="cpu")
    whole = indices_of(ferry.Loader(ds, **opts).epoch(2))
    l = ferry.Loader(ds, **opts)
    ep = l.epoch(2)
    first = [list(next(ep).indices) for _ in range(5)]
    state = l.state()
    assert state.startswith("ferry-state v2 seed=9 epoch=2 next_batch=5")
    ep.close()
    rest = indices_of(ferry.Loader(ds, **opts).resume(state))
    assert first + rest == whole
    # elastic: 2 ranks of batch 4 resume the same position; together each sample once
    ranks = [indices_of(ferry.Loader(ds, batch_size=4, shuffle=True, seed=9, rank=r, world_size=2,
                                     device="cpu").resume(state)) for r in range(2)]
    remaining = [i for b in whole[5:] for i in b]
    got = [i for r in ranks for b in r for i in b]
    assert sorted(set(got)) == sorted(remaining)


def test_state_dict_in_torchdatas_convention(ferry):
    ds = ferry.TensorDataset({"i": np.arange(40, dtype=np.int64)})
    l = ferry.Loader(ds, batch_size=10, shuffle=True, seed=3, device="cpu")
    epoch0 = indices_of(iter(l))
    it = iter(l)  # epoch 1
    b1 = list(next(it).indices)
    sd = l.state_dict()
    it.close()
    m = ferry.Loader(ds, batch_size=10, shuffle=True, seed=3, device="cpu")
    m.load_state_dict(sd)
    rest = indices_of(iter(m))
    full1 = indices_of(ferry.Loader(ds, batch_size=10, shuffle=True, seed=3, device="cpu").epoch(1))
    assert [b1] + rest == full1
    assert indices_of(iter(m)) == indices_of(
        ferry.Loader(ds, batch_size=10, shuffle=True, seed=3, device="cpu").epoch(2))
    assert epoch0 != full1
    with pytest.raises(ferry.ConfigError):
        m.resume("ferry-state v2 seed=4 epoch=0 next_batch=0 samples=40 shuffle=1 position=0 plan=0")


def test_stats_and_summary(ferry):
    l = ferry.Loader(Indexed(64), batch_size=16, device="cpu")
    for _ in l.epoch(0):
        pass
    s = l.stats()
    assert s.batches == 4 and s.samples == 64 and s.wall_seconds > 0
    assert isinstance(s.summary(), str) and s.summary() in repr(s)


def test_keeping_every_batch_grows_the_ring_within_the_budget(ferry):
    # prefetch=2: two slots in flight, and one more for the loop's own batch. A batch kept past
    # its iteration gets a new slot in its place (list(loader), every label kept for a metric).
    ds = ferry.TensorDataset({"i": np.arange(100, dtype=np.int64)})
    l = ferry.Loader(ds, batch_size=4, prefetch=2, device="cpu", autotune=False)
    kept = [b["i"].numpy() for b in l.epoch(0)]  # a numpy view keeps the batch's buffer
    assert np.array_equal(np.concatenate(kept), np.arange(100))
    assert l.stats().staging_allocations >= 25
    del kept
    assert len(indices_of(l.epoch(1))) == 25
    # Where the memory budget holds no more slots, keeping them all raises instead of hanging.
    three = ferry.Loader(ds, batch_size=4, prefetch=2, device="cpu", autotune=False)
    tight = ferry.Loader(ds, batch_size=4, prefetch=2, device="cpu", autotune=False,
                         memory_budget=three.stats().memory_bytes)
    kept = []
    with pytest.raises(ferry.ConfigError, match="all 3 staging slots are held by batches .*raise "
                       "memory_budget"):
        for b in tight.epoch(0):
            kept.append(b["i"].numpy())
    assert [k.tolist() for k in kept] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    del kept
    assert len(indices_of(tight.epoch(1))) == 25


def test_prefetch_1_runs_a_plain_loop(ferry):
    l = ferry.Loader(Indexed(50), batch_size=4, prefetch=1, device="cpu")
    assert [i for b in indices_of(l.epoch(0)) for i in b] == list(range(50))
    assert l.stats().staging_allocations == 2


def test_ragged_fields_pad_and_pack(ferry):
    tok = np.arange(1, 4097, dtype=np.uint16)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ferry-tokens-{os.getpid()}.bin")
    tok.tofile(path)
    try:
        ds = ferry.TokenDataset(path, seq_len=8, dtype="i32")
        assert len(ds) == (4096 - 9) // 8 + 1
        b = next(iter(ferry.Loader(ds, batch_size=3, device="cpu").epoch(0)))
        np.testing.assert_array_equal(b["input"].numpy()[1], np.arange(9, 17))
        np.testing.assert_array_equal(b["target"].numpy()[1], np.arange(10, 18))
    finally:
        os.remove(path)


def test_idx_and_csv_datasets(ferry, idx_files, tmp_path):
    ip, lp, images, labels = idx_files
    ds = ferry.IdxDataset(ip, lp)
    assert (len(ds), ds.rows, ds.cols) == (50, 4, 3)
    b = next(iter(ferry.Loader(ds, batch_size=50, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["image"].numpy(), images)
    np.testing.assert_array_equal(b["label"].numpy(), labels)
    csv = tmp_path / "t.csv"
    csv.write_text("a,b,label\n1,2,x\n3,4.5,y\n5,6,x\n")
    c = ferry.CsvDataset(csv)
    assert c.classes == ["x", "y"] and c.feature_names == ["a", "b"] and len(c) == 3
    b = next(iter(ferry.Loader(c, batch_size=3, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["features"].numpy(), [[1, 2], [3, 4.5], [5, 6]])
    np.testing.assert_array_equal(b["label"].numpy(), [0, 1, 0])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,label\n1,0\nparis,1\n")
    with pytest.raises(ferry.DataError, match="bad.csv"):
        ferry.CsvDataset(bad)
    with pytest.raises(ferry.DataError):
        ferry.IdxDataset(tmp_path / "missing", lp)


def test_two_loaders_in_two_threads(ferry):
    results = {}

    def run(name, n):
        l = ferry.Loader(Indexed(n), batch_size=7, shuffle=True, seed=2, device="cpu")
        results[name] = sorted(i for b in indices_of(l.epoch(0)) for i in b)

    threads = [threading.Thread(target=run, args=(k, n)) for k, n in (("a", 120), ("b", 90))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {"a": list(range(120)), "b": list(range(90))}


def test_deleting_a_loader_mid_epoch_returns_promptly(ferry):
    class Slow(Indexed):
        def __getitem__(self, i):
            time.sleep(0.002)
            return super().__getitem__(i)

    for _ in range(5):
        l = ferry.Loader(Slow(10000), batch_size=64, workers=2, device="cpu")
        ep = l.epoch(0)
        next(ep)
        start = time.monotonic()
        del ep, l
        assert time.monotonic() - start < 2.0


def run_script(code, timeout=60, **kwargs):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def test_interpreter_exit_with_a_live_loader(ferry):
    r = run_script("""
        import time, numpy as np, ferry
        class Slow:
            def __len__(self): return 100000
            def __getitem__(self, i):
                time.sleep(0.001)
                return {"x": np.float32(i)}
        l = ferry.Loader(Slow(), batch_size=32, workers=2, device="cpu")
        ep = l.epoch(0)
        next(ep)
        print("exiting", flush=True)
    """, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "exiting" in r.stdout


def test_ctrl_c_stops_a_loop_waiting_for_data(ferry):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time, numpy as np, ferry
        class Stuck:
            def __len__(self): return 100
            def __getitem__(self, i):
                if i >= 8:
                    time.sleep(30)
                return {"x": np.float32(i)}
        l = ferry.Loader(Stuck(), batch_size=8, workers=2, device="cpu")
        ep = l.epoch(0)
        next(ep)
        print("waiting", flush=True)
        t0 = time.monotonic()
        try:
            next(ep)
        except KeyboardInterrupt:
            print("interrupted after %.3f s" % (time.monotonic() - t0), flush=True)
        import os
        os._exit(0)
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().strip()
        took = time.monotonic() - sent
        assert line.startswith("interrupted after"), (line, p.stderr.read())
        assert took < 2.0  # the loop itself reports its wait; the budget covers process noise
        waited_after_signal = float(line.split()[2]) - 0.3
        assert waited_after_signal < 0.1 + 0.2
    finally:
        p.kill()
        p.wait()


def test_memory_stays_flat_over_200_epochs(ferry):
    def rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    ds = ferry.TensorDataset({"x": np.random.default_rng(0).random((2000, 64), np.float32),
                              "y": np.arange(2000, dtype=np.int64)})
    py = Indexed(200)
    l = ferry.Loader(ds, batch_size=100, shuffle=True, device="cpu")
    lp = ferry.Loader(py, batch_size=50, device="cpu")
    sizes = []
    for e in range(200):
        for b in l.epoch(e):
            t = b["x"].numpy().sum()
        for b in lp.epoch(e):
            pass
        if e in (20, 199):
            sizes.append(rss())
    assert sizes[1] - sizes[0] < 8 * 1024 * 1024, sizes


def test_csv_columns_of_text(ferry, tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("city,size,label\nparis,1,0\noslo,2,1\nparis,3,1\nlima,4,0\n")
    ds = ferry.CsvDataset(train, categorical=["city"])
    assert ds.categorical_names == ["city"] and ds.categories("city") == ["lima", "oslo", "paris"]
    assert [f[0] for f in ds.fields] == ["features", "label", "city"]
    b = next(iter(ferry.Loader(ds, batch_size=4, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["city"].numpy(), [2, 1, 2, 0])
    np.testing.assert_array_equal(b["features"].numpy(), [[1], [2], [3], [4]])
    test = tmp_path / "test.csv"
    test.write_text("city,size,label\nrome,1,0\noslo,2,1\n")
    with pytest.raises(ferry.DataError, match="rome"):
        ferry.CsvDataset(test, categorical=["city"], vocabulary=ds)
    t = ferry.CsvDataset(test, categorical=["city"], vocabulary=ds, unknown="reserved")
    b = next(iter(ferry.Loader(t, batch_size=2, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["city"].numpy(), [3, 1])
    v = ferry.CsvDataset(test, categorical=["city"], vocabulary={"city": ["rome", "oslo"]})
    b = next(iter(ferry.Loader(v, batch_size=2, device="cpu").epoch(0)))
    np.testing.assert_array_equal(b["city"].numpy(), [0, 1])


def test_a_text_column_among_the_features_names_the_categorical_keyword(ferry, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("x,name,label\n1,foo,1\n2,bar,0\n")
    with pytest.raises(ferry.DataError) as raised:
        ferry.CsvDataset(csv, label="label", classes=False)
    assert str(raised.value).endswith(
        'line 2, column 2 ("name"): "foo" is not a number (a column of text: read it as '
        'categories with CsvOptions::categorical = {Column::name("name")}, in Python '
        'categorical=["name"])'), str(raised.value)
    ds = ferry.CsvDataset(csv, label="label", classes=False, categorical=["name"])
    assert ds.categories("name") == ["bar", "foo"]


def test_autotune_within_a_budget(ferry):
    ds = ferry.TensorDataset({"i": np.arange(5000, dtype=np.int64)})
    fixed_loader = ferry.Loader(ds, batch_size=50, shuffle=True, seed=4, device="cpu",
                                autotune=False, workers=2, prefetch=4)
    fixed = indices_of(fixed_loader.epoch(0))
    s = fixed_loader.stats()
    # What was set, though the loader makes one slot more for the batch the loop holds.
    assert not s.autotune and (s.workers, s.prefetch, s.memory_budget) == (2, 4, 0)
    l = ferry.Loader(ds, batch_size=50, shuffle=True, seed=4, device="cpu", memory_budget=1 << 20)
    assert indices_of(l.epoch(0)) == fixed  # the same batches whatever the tuning
    s = l.stats()
    assert s.autotune and 1 <= s.workers and 1 <= s.prefetch and 0 < s.memory_bytes <= 1 << 20
    with pytest.raises(ferry.ConfigError, match="bytes"):
        ferry.Loader(ds, batch_size=50, device="cpu", autotune=True, memory_budget=10)
    # On by default, within the default budget: an eighth of the memory at most.
    d = ferry.Loader(ds, batch_size=50, device="cpu")
    assert len(indices_of(d.epoch(0))) == 100
    s = d.stats()
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert s.autotune and s.memory_budget == ferry.default_memory_budget() <= physical // 8
    assert 0 < s.memory_bytes <= s.memory_budget and "MiB budget" in s.summary()


def test_files_as_urls(ferry, tmp_path):
    assert ferry.expand_braces("s3://b/train-{0000..0002}.tar") == [
        "s3://b/train-0000.tar", "s3://b/train-0001.tar", "s3://b/train-0002.tar"]
    with pytest.raises(ferry.ConfigError):
        ferry.expand_braces("train-{3..1}.tar")
    tokens = np.arange(1, 200, dtype=np.uint16)
    path = tmp_path / "t.bin"
    tokens.tofile(path)
    remote = ferry.RemoteOptions(cache_dir=tmp_path / "cache", connections=2)
    ds = ferry.TokenDataset(["file://" + str(path)], seq_len=8, remote=remote)
    local = ferry.TokenDataset([path], seq_len=8)
    assert len(ds) == len(local)
    a = next(iter(ferry.Loader(ds, batch_size=len(ds), device="cpu").epoch(0)))
    b = next(iter(ferry.Loader(local, batch_size=len(local), device="cpu").epoch(0)))
    np.testing.assert_array_equal(a["input"].numpy(), b["input"].numpy())
    with pytest.raises(ferry.DataError, match="missing.bin"):
        ferry.TokenDataset(["file://" + str(tmp_path / "missing.bin")], seq_len=8, remote=remote)


def test_ragged_lengths_and_the_longest_from_a_webdatasets_index(ferry, tmp_path):
    import io
    import tarfile

    texts = [b"abc", b"abcdefg", b"a", b"abcdefghij", b"abcde"]

    def shard(name, items):
        path = tmp_path / name
        with tarfile.open(path, "w") as tar:
            for key, data in items:
                for ext, payload in (("txt", data), ("cls", str(len(data)).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        return path

    a = ferry.WebDataset([shard("a.tar", [(f"s{i}", t) for i, t in enumerate(texts)])])
    b = ferry.WebDataset([shard("b.tar", [("t0", b"x" * 12), ("t1", b"y" * 2)])])
    assert [a.length(i, "txt") for i in range(len(a))] == [3, 7, 1, 10, 5]
    assert a.max_length("txt") == 10
    with pytest.raises(KeyError, match="not ragged"):
        a.max_length("cls")
    with pytest.raises(KeyError, match="no field"):
        a.length(0, "png")
    mix = ferry.Mixture([(a, 1), (b, 1)], epoch_size=7)
    assert mix.max_length("txt") == 12
    # Packed batches of the mixture: each sample's bytes, their lengths from the index.
    loader = ferry.Loader(mix, batch_size=7, device="cpu", ragged="pack")
    batch = next(iter(loader.epoch(0)))
    lengths = batch.lengths("txt").numpy()
    offsets = batch.offsets("txt").numpy()
    data = batch["txt"].numpy().tobytes()
    expected = texts + [b"x" * 12, b"y" * 2]
    for i, index in enumerate(batch.indices):
        assert lengths[i] == len(expected[index])
        assert data[offsets[i]:offsets[i + 1]] == expected[index]
