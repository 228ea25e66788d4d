# pytest over the Python module of a build tree: ctest's python.pytest sets PYTHONPATH to
# <build>/python. Run by hand: PYTHONPATH=build/release/python python3 -m pytest tests/python
import gzip
import os
import struct

import numpy as np
import pytest


def pytest_collection_modifyitems(config, items):
    """FERRY_PYTEST_SHARD=i/n keeps the i-th of every n tests collected (0 <= i < n): ctest runs
    the shards of one file side by side (python/CMakeLists.txt), so that the longest file does
    not run alone at the end of a step."""
    shard = os.environ.get("FERRY_PYTEST_SHARD")
    if not shard:
        return
    i, n = (int(part) for part in shard.split("/"))
    keep = [item for k, item in enumerate(items) if k % n == i]
    config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % n != i])
    items[:] = keep


@pytest.fixture(scope="session")
def ferry():
    import ferry as module

    return module


class Indexed:
    """A Python dataset whose sample i encodes i: "x" u8 [5] = (i*7 + j) % 251, "y" i64 = i."""

    def __init__(self, n, bad=(), error=ValueError):
        self.n = n
        self.bad = set(bad)
        self.error = error

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.bad:
            raise self.error(f"sample {i} is corrupt")
        return {"x": ((np.arange(5) + i * 7) % 251).astype(np.uint8), "y": np.int64(i)}


def expected_x(i):
    return (np.arange(5, dtype=np.int64) + i * 7) % 251


@pytest.fixture
def indexed():
    return Indexed


def write_idx(tmp_path, n=50, rows=4, cols=3):
    images = (np.arange(n * rows * cols) % 256).astype(np.uint8).reshape(n, rows, cols)
    labels = (np.arange(n) % 10).astype(np.uint8)
    ip = tmp_path / "images.idx.gz"
    lp = tmp_path / "labels.idx"
    with gzip.open(ip, "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, rows, cols) + images.tobytes())
    lp.write_bytes(struct.pack(">II", 0x801, n) + labels.tobytes())
    return ip, lp, images, labels


@pytest.fixture
def idx_files(tmp_path):
    return write_idx(tmp_path)


FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.fixture
def fashion():
    if not os.path.exists(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST is not installed (Debian's dataset-fashion-mnist)")
    return FASHION
