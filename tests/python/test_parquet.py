# ferry.ParquetDataset from Python, on files written by an independent writer
# (tests/table/write_tables.js: apache-arrow and parquet-wasm from npm, which scripts/setup
# installs); skipped, saying so, where that writer is not installed.
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
    if not os.path.isdir(os.path.join(WRITER, "node_modules", "parquet-wasm")):
        pytest.skip("the Parquet writer is not installed (scripts/setup runs npm ci in tests/table)")
    out = tmp_path_factory.mktemp("parquet")
    subprocess.run(["node", os.path.join(WRITER, "write_tables.js"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


def test_parquet_columns_arrive_as_typed_fields(ferry, tables):
    ds = ferry.ParquetDataset(
        [str(tables / "part0.parquet"), str(tables / "part1.parquet"), tables / "part2.parquet"],
        ["i8", "u64", "f32", "s", "bin", "nf"],
        categorical=["s"],
        missing="nan",
    )
    assert len(ds) == 50
    assert ds.fields == [("i8", "i8", ()), ("u64", "u64", ()), ("f32", "f32", ()),
                         ("s", "i64", ()), ("bin", "u8", (None,)), ("nf", "f64", ())]
    cats = ds.categories("s")
    assert cats == sorted(FRUIT)
    loader = ferry.Loader(ds, batch_size=8, shuffle=True, seed=3, device="cpu")
    seen = []
    for b in loader.epoch(0):
        r = b.indices
        seen.extend(r.tolist())
        i8 = b["i8"].numpy()
        assert i8.dtype == np.int8
        np.testing.assert_array_equal(i8, ((r * 37) % 256 - 128).astype(np.int8))
        u64 = b["u64"].numpy()
        assert u64.dtype == np.uint64
        np.testing.assert_array_equal(u64, np.uint64(2**64 - 1) - (r * 3).astype(np.uint64))
        np.testing.assert_array_equal(b["f32"].numpy(), (r * 0.5 - 3).astype(np.float32))
        assert [cats[c] for c in b["s"].numpy()] == [FRUIT[(i * 3) % 5] for i in r]
        lengths = b.lengths("bin").numpy()
        data = b["bin"].numpy()
        for j, i in enumerate(r):
            assert lengths[j] == i % 6
            np.testing.assert_array_equal(data[j, : lengths[j]],
                                          [(i * 31 + k * 7) % 256 for k in range(i % 6)])
        nf = b["nf"].numpy()
        for j, i in enumerate(r):
            if i % 4 == 1:
                assert np.isnan(nf[j])
            else:
                assert nf[j] == i * 1.5
    assert sorted(seen) == list(range(50))


def test_parquet_errors_name_the_column_and_the_file(ferry, tables):
    with pytest.raises(ferry.ConfigError, match='"ts".*TIMESTAMP'):
        ferry.ParquetDataset(tables / "all_zstd_dict_v2.parquet", ["ts"])
    with pytest.raises(ferry.ConfigError, match="missing"):
        ferry.ParquetDataset(tables / "all_zstd_dict_v2.parquet", ["nf"], missing="zero")
    ds = ferry.ParquetDataset(tables / "all_zstd_dict_v2.parquet", ["nf"])
    loader = ferry.Loader(ds, batch_size=4, device="cpu")
    with pytest.raises(ferry.DataError, match='all_zstd_dict_v2.parquet: row 1, column "nf"'):
        for _ in loader.epoch(0):
            pass
    bad = tables / "cut.parquet"
    bad.write_bytes((tables / "all_zstd_dict_v2.parquet").read_bytes()[:500])
    with pytest.raises(ferry.DataError, match="cut.parquet: footer"):
        ferry.ParquetDataset(bad)


def test_parquet_urls_are_read_by_ranges(ferry, tables):
    # file:// URLs, and http:// from Python's own server, which ignores Range and answers every
    # request with the whole file (each read takes the bytes asked and stops there).
    import functools
    import http.server
    import threading

    cols = ["i32", "f64", "s"]
    local = ferry.ParquetDataset(str(tables / "all_zstd_dict_v1.parquet"), cols, categorical=["s"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tables))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        http_url = f"http://127.0.0.1:{server.server_address[1]}/all_zstd_dict_v1.parquet"
        for url in ["file://" + str(tables / "all_zstd_dict_v1.parquet"), http_url]:
            ds = ferry.ParquetDataset(url, cols, categorical=["s"])
            assert len(ds) == len(local) == 50
            assert ds.categories("s") == local.categories("s")
            got = {}
            for b in ferry.Loader(ds, batch_size=8, shuffle=True, seed=1, device="cpu").epoch(0):
                for j, i in enumerate(b.indices.tolist()):
                    got[i] = tuple(b[c].numpy()[j].item() for c in cols)
            want = {}
            for b in ferry.Loader(local, batch_size=50, device="cpu").epoch(0):
                for j, i in enumerate(b.indices.tolist()):
                    want[i] = tuple(b[c].numpy()[j].item() for c in cols)
            assert got == want, url
        with pytest.raises(ferry.DataError, match="missing.parquet"):
            ferry.ParquetDataset(http_url.replace("all_zstd_dict_v1", "missing"), cols)
    finally:
        server.shutdown()
        server.server_close()


def _png(w, h, salt):
    import struct
    import zlib

    rows = b"".join(b"\x00" + bytes((x * 7 + y * 13 + salt * 29) % 256 for x in range(w * 3))
                    for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_parquet_image_structs_decode_as_image_folder(ferry, tables, tmp_path):
    # The writer's image tables from PNGs written here, which ImageFolder reads as class "a".
    images = tmp_path / "images"
    folder = tmp_path / "folder" / "a"
    images.mkdir()
    folder.mkdir(parents=True)
    for i in range(20):
        data = _png(16 + i % 5, 12 + i % 3, i)
        (images / f"{i:03d}.png").write_bytes(data)
        (folder / f"{i:03d}.png").write_bytes(data)
    out = tmp_path / "out"
    subprocess.run(["node", os.path.join(WRITER, "write_tables.js"), str(out), str(images)],
                   check=True, stdout=subprocess.DEVNULL)
    keywords = dict(height=8, width=6, geometry="random_resized_crop", random_flip=True)
    ds = ferry.ParquetDataset(str(out / "images.parquet"), ["image", "raw", "label"],
                              images=["image", "raw"], **keywords)
    assert len(ds) == 20
    assert ds.num_row_groups == 3
    assert ds.fields[0] == ("image", "u8", (8, 6, 3))
    want = ferry.Loader(ferry.ImageFolder(str(tmp_path / "folder"), **keywords), batch_size=6,
                        device="cpu")
    got = ferry.Loader(ds, batch_size=6, device="cpu")
    n = 0
    for g, w in zip(got.epoch(0), want.epoch(0)):
        np.testing.assert_array_equal(g["image"].numpy(), w["image"].numpy())
        np.testing.assert_array_equal(g["raw"].numpy(), w["image"].numpy())
        np.testing.assert_array_equal(g["label"].numpy(), np.arange(n, n + len(g.indices)))
        n += len(g.indices)
    assert n == 20
    with pytest.raises(ferry.DataError, match=r'row 1, column "image".*null'):
        for _ in ferry.Loader(ferry.ParquetDataset(str(out / "images_null.parquet"),
                                                   images=["image"], height=8, width=8),
                              batch_size=1, device="cpu").epoch(0):
            pass


def test_parquet_urls_take_the_remote_keyword(ferry, tables):
    # Python's own server, answering its first GET requests with 503 as told.
    import functools
    import http.server
    import threading

    failures = [0]

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            if failures[0] > 0:
                failures[0] -= 1
                self.send_error(503, "busy")
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    cols = ["i32", "f64", "s"]
    name = "all_zstd_dict_v1.parquet"
    local = ferry.ParquetDataset(str(tables / name), cols, categorical=["s"])
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(tables)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{name}"
        # Two 503s: no retry fails at open, naming the URL; three retries get past them.
        failures[0] = 2
        with pytest.raises(ferry.DataError, match=f"{name}.*503"):
            ferry.ParquetDataset(url, cols, categorical=["s"],
                                 remote=ferry.RemoteOptions(retries=0))
        failures[0] = 2
        ds = ferry.ParquetDataset(url, cols, categorical=["s"],
                                  remote=ferry.RemoteOptions(retries=3, timeout_seconds=10))
        assert failures[0] == 0
        assert len(ds) == len(local) == 50

        def rows(d):
            out = {}
            for b in ferry.Loader(d, batch_size=8, shuffle=True, seed=1, device="cpu").epoch(0):
                for j, i in enumerate(b.indices.tolist()):
                    out[i] = tuple(b[c].numpy()[j].item() for c in cols)
            return out

        assert rows(ds) == rows(local)
        with pytest.raises(ferry.ConfigError, match="ParquetDataset.*retries"):
            ferry.ParquetDataset(url, cols, remote=ferry.RemoteOptions(retries=-1))
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def lists(tmp_path_factory):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    if not os.path.isdir(os.path.join(WRITER, "node_modules", "parquet-wasm")):
        pytest.skip("the Parquet writer is not installed (scripts/setup runs npm ci in tests/table)")
    out = tmp_path_factory.mktemp("parquet_lists")
    subprocess.run(["node", os.path.join(WRITER, "write_lists.js"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out


@pytest.mark.parametrize("ragged", ["pad", "pack"])
def test_parquet_list_columns_are_ragged_and_fixed_size_lists_take_their_shape(ferry, lists,
                                                                               ragged):
    # tests/table/write_lists.js: li list<int32> of r % 5 values r*10+k-100; f4
    # fixed_size_list<float>[4] of r+k/2; a2 [2][3] floats r*10+i*3+j.
    ds = ferry.ParquetDataset(lists / "lists_plain_v2.parquet", ["li", "f4", "a2"])
    assert len(ds) == 60
    assert ds.fields == [("li", "i32", (None,)), ("f4", "f32", (4,)), ("a2", "f32", (2, 3))]
    loader = ferry.Loader(ds, batch_size=7, shuffle=True, seed=4, device="cpu", ragged=ragged)
    seen = []
    for b in loader.epoch(0):
        r = b.indices
        seen.extend(r.tolist())
        lengths = b.lengths("li").numpy()
        li = b["li"].numpy()
        assert li.dtype == np.int32
        starts = b.offsets("li").numpy() if ragged == "pack" else None
        for j, i in enumerate(r):
            want = [i * 10 + k - 100 for k in range(i % 5)]
            assert lengths[j] == i % 5
            got = li[starts[j]:starts[j + 1]] if ragged == "pack" else li[j, : lengths[j]]
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(b["f4"].numpy(),
                                      [[i + k * 0.5 for k in range(4)] for i in r])
        np.testing.assert_array_equal(
            b["a2"].numpy(), [[[i * 10 + a * 3 + c for c in range(3)] for a in range(2)] for i in r])
    assert sorted(seen) == list(range(60))


def test_parquet_list_nulls_and_wrong_lengths_name_the_row(ferry, lists):
    ds = ferry.ParquetDataset(lists / "lists_nulls.parquet", ["f4"], missing="nan")
    loader = ferry.Loader(ds, batch_size=60, device="cpu")
    f4 = next(iter(loader.epoch(0)))["f4"].numpy()
    for i in range(60):
        if i % 5 == 2 or i % 6 == 1:
            assert np.isnan(f4[i]).all()
        else:
            np.testing.assert_array_equal(f4[i], [i + k * 0.5 for k in range(4)])
    ds = ferry.ParquetDataset(lists / "wrong_list.parquet")
    loader = ferry.Loader(ds, batch_size=4, device="cpu")
    with pytest.raises(ferry.DataError, match='wrong_list.parquet: row group 0, row 13, column "v"'):
        for _ in loader.epoch(0):
            pass


def test_the_torch_adapter_gives_a_tables_rows_as_dicts_with_lengths(ferry, tables):
    # A table's rows are dicts (ds[i]); ferry.torch.DataLoader gave tuples, and a ragged
    # field's padding could not be told from its bytes.
    torch = pytest.importorskip("torch")
    import ferry.torch as ft
    ds = ferry.ParquetDataset(str(tables / "part0.parquet"), ["i8", "bin"])
    assert isinstance(ds[0], dict)
    seen = []
    for b in ft.DataLoader(ds, batch_size=4, device="cpu"):
        assert isinstance(b, dict) and set(b) == {"i8", "bin", "bin_lengths"}
        for j in range(len(b["i8"])):
            i = len(seen)
            seen.append(i)
            assert int(b["i8"][j]) == (i * 37) % 256 - 128
            n = int(b["bin_lengths"][j])
            assert n == i % 6
            assert b["bin"][j, :n].tolist() == [(i * 31 + k * 7) % 256 for k in range(n)]
    assert seen == list(range(len(ds)))
    # A table of fixed fields alone gives dicts too: its rows are dicts.
    one = ferry.ParquetDataset(str(tables / "part0.parquet"), ["i8"])
    assert isinstance(next(iter(ft.DataLoader(one, batch_size=4, device="cpu"))), dict)
