# ferry.ArrowDataset from Python, on Arrow IPC files written by an independent writer
# (tests/table/write_arrow.js: apache-arrow from npm, which scripts/setup installs); skipped,
# saying so, where that writer is not installed.
import os
import shutil
import subprocess

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "..", "table")
FRUIT = ["pear", "apple", "fig", "banana", "kiwi"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not os.path.isdir(os.path.join(WRITER, "node_modules", "apache-arrow")):
        pytest.skip("apache-arrow is not installed (scripts/setup runs npm ci in tests/table)")
    out = tmp_path_factory.mktemp("arrow")
    subprocess.run(["node", os.path.join(WRITER, "write_arrow.js"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


@pytest.mark.parametrize("name", ["all.arrow", "all_file.arrow", "all_lz4.arrow", "all_zstd.arrow"])
def test_arrow_columns_arrive_as_typed_fields(ferry, tables, name):
    ds = ferry.ArrowDataset(tables / name, ["i8", "u64", "f16", "fsl", "lst", "s", "d", "bin", "nf"],
                            categorical=["s"], missing="nan")
    assert len(ds) == 250
    assert ds.num_record_batches == 3
    assert ds.fields == [("i8", "i8", ()), ("u64", "u64", ()), ("f16", "f16", ()),
                         ("fsl", "f32", (3,)), ("lst", "i32", (None,)), ("s", "i64", ()),
                         ("d", "i64", ()), ("bin", "u8", (None,)), ("nf", "f64", ())]
    cats = ds.categories("s")
    assert cats == sorted(FRUIT)
    assert ds.categories("d") == cats
    loader = ferry.Loader(ds, batch_size=8, shuffle=True, seed=3, device="cpu")
    seen = []
    for b in loader.epoch(0):
        r = b.indices
        seen.extend(r.tolist())
        i8 = b["i8"].numpy()
        assert i8.dtype == np.int8
        np.testing.assert_array_equal(i8, ((r * 37) % 256 - 128).astype(np.int8))
        np.testing.assert_array_equal(b["u64"].numpy(),
                                      np.uint64(2**64 - 1) - (r * 3).astype(np.uint64))
        f16 = b["f16"].numpy()
        assert f16.dtype == np.float16
        np.testing.assert_array_equal(f16, (r * 0.25 - 8).astype(np.float16))
        fsl = b["fsl"].numpy()
        np.testing.assert_array_equal(fsl, np.stack([r, r + 0.5, -r], axis=1).astype(np.float32))
        assert [cats[c] for c in b["s"].numpy()] == [FRUIT[(i * 3) % 5] for i in r]
        assert [cats[c] for c in b["d"].numpy()] == [FRUIT[(i * 3) % 5] for i in r]
        lst, lst_len = b["lst"].numpy(), b.lengths("lst").numpy()
        bins, bin_len = b["bin"].numpy(), b.lengths("bin").numpy()
        nf = b["nf"].numpy()
        for j, i in enumerate(r):
            assert lst_len[j] == i % 4
            np.testing.assert_array_equal(lst[j, : lst_len[j]], [i * 10 + k for k in range(i % 4)])
            assert bin_len[j] == i % 6
            np.testing.assert_array_equal(bins[j, : bin_len[j]],
                                          [(i * 31 + k * 7) % 256 for k in range(i % 6)])
            if i % 4 == 1:
                assert np.isnan(nf[j])
            else:
                assert nf[j] == i * 1.5
    assert sorted(seen) == list(range(250))


def test_arrow_errors_name_the_column_and_the_file(ferry, tables):
    with pytest.raises(ferry.ConfigError, match='"ts".*timestamp'):
        ferry.ArrowDataset(tables / "all.arrow", ["ts"])
    with pytest.raises(ferry.ConfigError, match="missing"):
        ferry.ArrowDataset(tables / "all.arrow", ["nf"], missing="zero")
    ds = ferry.ArrowDataset(tables / "all.arrow", ["nf"])
    loader = ferry.Loader(ds, batch_size=4, device="cpu")
    with pytest.raises(ferry.DataError, match='all.arrow: row 1, column "nf"'):
        for _ in loader.epoch(0):
            pass
    bad = tables / "cut.arrow"
    bad.write_bytes((tables / "all.arrow").read_bytes()[:5000])
    with pytest.raises(ferry.DataError, match="cut.arrow: message"):
        ferry.ArrowDataset(bad, ["i32"])


def _flaky_server(directory, failures):
    # Python's own server (it ignores Range: every answer is the whole file), answering its first
    # `failures[0]` GET requests with 503.
    import functools
    import http.server
    import threading

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            if failures[0] > 0:
                failures[0] -= 1
                self.send_error(503, "busy")
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _rows(ferry, ds, cols):
    out = {}
    for b in ferry.Loader(ds, batch_size=16, shuffle=True, seed=2, device="cpu").epoch(0):
        for j, i in enumerate(b.indices.tolist()):
            out[i] = tuple(b[c].numpy()[j].item() for c in cols)
    return out


@pytest.mark.parametrize("name", ["all.arrow", "all_file_lz4.arrow"])
def test_arrow_urls_take_the_remote_keyword(ferry, tables, name):
    cols = ["i32", "f64", "s"]
    failures = [0]
    server = _flaky_server(tables, failures)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{name}"
        local = ferry.ArrowDataset(tables / name, cols, categorical=["s"])
        # Two 503s: no retry fails at open, naming the URL; three retries get past them.
        failures[0] = 2
        with pytest.raises(ferry.DataError, match=f"{name}.*503"):
            ferry.ArrowDataset(url, cols, categorical=["s"], remote=ferry.RemoteOptions(retries=0))
        failures[0] = 2
        ds = ferry.ArrowDataset(url, cols, categorical=["s"],
                                remote=ferry.RemoteOptions(retries=3, timeout_seconds=10))
        assert failures[0] == 0
        assert len(ds) == len(local) == 250
        assert ds.categories("s") == local.categories("s")
        want = _rows(ferry, local, cols)
        assert want[7] == (7 * 100000 - 2000000000, 7 * 0.25 + 1e10,
                           sorted(FRUIT).index(FRUIT[(7 * 3) % 5]))
        assert _rows(ferry, ds, cols) == want
        with pytest.raises(ferry.ConfigError, match="ArrowDataset.*retries"):
            ferry.ArrowDataset(url, cols, remote=ferry.RemoteOptions(retries=-1))
    finally:
        server.shutdown()
        server.server_close()


def test_arrow_hugging_face_arrays_take_their_shape(ferry, tables):
    # write_arrow.js's nested.arrow: Array2D (2, 3) float32 "a2" (null at r % 11 == 4), Array3D
    # (None, 2, 2) int32 "a3" (r % 3 blocks), fixed_size_list<float32>[2] "nfsl" with nulls.
    ds = ferry.ArrowDataset(tables / "nested.arrow", ["a2", "a3", "nfsl"], missing="nan")
    assert ds.fields == [("a2", "f32", (2, 3)), ("a3", "i32", (None, 2, 2)),
                         ("nfsl", "f32", (2,))]
    seen = []
    for b in ferry.Loader(ds, batch_size=8, shuffle=True, seed=4, device="cpu").epoch(0):
        a2, a3, a3_len, nfsl = (b["a2"].numpy(), b["a3"].numpy(), b.lengths("a3").numpy(),
                                b["nfsl"].numpy())
        for j, r in enumerate(b.indices.tolist()):
            seen.append(r)
            if r % 11 == 4:
                assert np.isnan(a2[j]).all()
            else:
                np.testing.assert_array_equal(a2[j], [[r, r + 1, r + 2], [-r, -r - 1, -r - 2]])
            assert a3_len[j] == r % 3
            want = np.array([[[r, k], [r + k, -r]] for k in range(r % 3)], np.int32)
            np.testing.assert_array_equal(a3[j, : r % 3], want.reshape(r % 3, 2, 2))
            if r % 5 in (1, 3):
                assert np.isnan(nfsl[j]).all()
            else:
                np.testing.assert_array_equal(nfsl[j], [r, r / 2])
    assert sorted(seen) == list(range(60))
    with pytest.raises(ferry.DataError, match=r'row 5, column "a2bad".*shape \(2, 2\)'):
        for _ in ferry.Loader(ferry.ArrowDataset(tables / "nested.arrow", ["a2bad"]),
                              batch_size=4, device="cpu").epoch(0):
            pass
    with pytest.raises(ferry.ConfigError, match=r'"ll".*list<list<int32>>'):
        ferry.ArrowDataset(tables / "nested.arrow", ["ll"])
