"""Datasets written in Python, read by both bench/py/ferry_py_side.py (through ferry.Loader) and
bench/py/torch_side.py (through torch's DataLoader): the same object on both sides, so that the
loaders alone differ. Each has __len__ and __getitem__(i) returning a dict of numpy arrays.

  FashionArrays(dir)       Fashion-MNIST train as numpy arrays; __getitem__ indexes them:
                           "image" uint8 [28, 28], "label" int64 (no work per item)
  PngFiles(root, count)    `count` PNGs of an ImageFolder tree (spread over it, every class),
                           opened and decoded by PIL: "image" uint8 [28, 28], "label" int64
  JpegFiles(root)          every JPEG of an ImageFolder tree, decoded by PIL, resized (shorter
                           side 256, bilinear) and center-cropped to 224: "image" uint8
                           [224, 224, 3], "label" int64 (some ms of C work per item, most of it
                           with the GIL released)

The pyworkers part reads these in worker processes on both sides (bench/python):

  pyworkers-png            PngFiles, flipped left-right at random with numpy (np.random)
  pyworkers-jpeg           JpegFiles
  pyworkers-numpy          rows of a 100,000 x 256 f32 array made in memory, standardized
                           ((row - mean) / std): "x" f32 [256], "label" int64
"""

import os

import numpy as np

import make_data

WORKLOADS = ("pyobj-numpy", "pyobj-png", "pyobj-jpeg")
PYWORKERS = ("pyworkers-png", "pyworkers-jpeg", "pyworkers-numpy")
PNG_ITEMS = 10_000  # pyobj-png reads this many of the folder's PNGs (all, if it has fewer)


def _files(root, ext):
    """(path, label) of an ImageFolder tree, classes in name order, files sorted."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        folder = os.path.join(root, c)
        out.extend((os.path.join(folder, f), label)
                   for f in sorted(os.listdir(folder)) if f.endswith(ext))
    return out


class FashionArrays:
    def __init__(self, directory):
        x, y = make_data.fashion_mnist(directory)
        self.x, self.y = np.ascontiguousarray(x), y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"image": self.x[i], "label": self.y[i]}


class PngFiles:
    def __init__(self, root, count=PNG_ITEMS):
        files = _files(root, ".png")
        n = min(count, len(files))
        self.files = [files[i * len(files) // n] for i in range(n)]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.files[i]
        with Image.open(path) as im:
            return {"image": np.asarray(im.convert("L")), "label": np.int64(label)}


class JpegFiles:
    def __init__(self, root, size=256, crop=224):
        self.files = _files(root, ".jpg")
        self.size, self.crop = size, crop

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.files[i]
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = self.size / min(w, h)
            im = im.resize((max(self.crop, round(w * s)), max(self.crop, round(h * s))),
                           Image.BILINEAR)
            w, h = im.size
            left, top = (w - self.crop) // 2, (h - self.crop) // 2
            im = im.crop((left, top, left + self.crop, top + self.crop))
            return {"image": np.asarray(im), "label": np.int64(label)}


class PngFlip(PngFiles):
    def __getitem__(self, i):
        item = super().__getitem__(i)
        if np.random.rand() < 0.5:
            item["image"] = np.ascontiguousarray(item["image"][:, ::-1])
        return item


class NumpyRows:
    def __init__(self, rows=100_000, width=256):
        self.x = np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        row = self.x[i]
        return {"x": (row - row.mean()) / (row.std() + 1e-6), "label": np.int64(i % 10)}


def make(workload, data):
    """The dataset of a pyobj-* workload; `data` is the Fashion-MNIST dir, the PNG root or the
    JPEG root."""
    if workload == "pyobj-numpy":
        return FashionArrays(data)
    if workload == "pyobj-png":
        return PngFiles(data)
    if workload in ("pyobj-jpeg", "pyworkers-jpeg"):
        return JpegFiles(data)
    if workload == "pyworkers-png":
        return PngFlip(data)
    if workload == "pyworkers-numpy":
        return NumpyRows()
    raise ValueError(f"unknown workload {workload}")
