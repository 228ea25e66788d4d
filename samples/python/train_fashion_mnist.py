#!/usr/bin/env python3
"""Trains a small torch model on Fashion-MNIST through ferry, then runs the same loop through
torch's DataLoader (2 worker processes) and prints both throughputs.

    PYTHONPATH=build/release/python python3 samples/python/train_fashion_mnist.py
    ... train_fashion_mnist.py --png-folder build/release/samples/fashion-mnist-small/train

With --png-folder (a folder samples/make_image_folder wrote: <class>/<n>.png), it also trains on
a dataset written in Python, the kind most torch users have: __getitem__ opens a PNG with PIL
and flips it at random with numpy. ferry runs it in 2 worker processes (ferry.torch.DataLoader
with num_workers=2), torch's DataLoader in its 2 workers, and both throughputs are printed.

ferry's loop is PyTorch's, unchanged but for the loader: batches arrive as ferry tensors on
ferry.Device.best() and become torch tensors without a copy (ferry.torch).
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch

import ferry
import ferry.torch as ft

DATA = "/usr/share/datasets/fashion-mnist"


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def train_epoch(net, opt, batches, device):
    n = 0
    for x, y in batches:
        x = x.to(device, non_blocking=True).float().div_(255.0)
        y = y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        n += len(y)
    return n


def accuracy(net, batches, device):
    right = total = 0
    with torch.no_grad():
        for x, y in batches:
            x = x.to(device).float().div_(255.0)
            right += (net(x).argmax(1) == y.to(device)).sum().item()
            total += len(y)
    return right / total


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


class Arrays(torch.utils.data.Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.images[i].copy()), int(self.labels[i])


class PngFolder:
    """<class>/<n>.png under `root`, decoded by PIL, flipped left-right with probability 1/2
    (numpy's global generator: ferry seeds it per sample). Returns (image u8 [28, 28], label)."""

    def __init__(self, root):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = [(os.path.join(root, c, n), k) for k, c in enumerate(classes)
                      for n in sorted(os.listdir(os.path.join(root, c))) if n.endswith(".png")]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image  # noqa: PLC0415 (imported in the worker processes)

        path, label = self.files[i]
        with Image.open(path) as im:
            image = np.asarray(im.convert("L"))
        if np.random.rand() < 0.5:
            image = image[:, ::-1]
        return np.ascontiguousarray(image), label


def python_dataset_run(folder, epochs, batch_size, device, torch_loader):
    """Trains on PngFolder(folder) through ferry's worker processes, then through torch's
    DataLoader; prints both throughputs."""
    rates = {}
    runs = [("ferry (2 worker processes)", lambda: ft.DataLoader(
        PngFolder(folder), batch_size=batch_size, shuffle=True, num_workers=2, drop_last=True))]
    if torch_loader:
        runs.append(("torch DataLoader (2 workers)", lambda: torch.utils.data.DataLoader(
            PngFolder(folder), batch_size=batch_size, shuffle=True, num_workers=2,
            drop_last=True, persistent_workers=True)))
    for name, make in runs:
        loader = make()
        net = model().to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        train_epoch(net, opt, loader, device)  # the processes start, the caches warm
        start = time.perf_counter()
        samples = sum(train_epoch(net, opt, loader, device) for _ in range(epochs))
        rates[name] = samples / (time.perf_counter() - start)
        print(f"{name}, a Python dataset (PIL PNGs): {rates[name]:,.0f} samples/s")
        if hasattr(loader, "stats"):
            print(f"ferry: {loader.stats().summary()}")
    if len(rates) == 2:
        ferry_rate, torch_rate = rates.values()
        print(f"ferry / DataLoader, a Python dataset: {ferry_rate / torch_rate:.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DATA)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--no-torch-loader", action="store_true", help="skip the DataLoader run")
    p.add_argument("--png-folder", help="also train on this PNG folder, read by a Python dataset")
    a = p.parse_args()
    f = lambda name: os.path.join(a.data, name)
    device = torch.device(str(ferry.Device.best()))
    train = ferry.IdxDataset(f("train-images-idx3-ubyte.gz"), f("train-labels-idx1-ubyte.gz"))
    test = ferry.IdxDataset(f("t10k-images-idx3-ubyte.gz"), f("t10k-labels-idx1-ubyte.gz"))
    loader = ferry.Loader(train, batch_size=a.batch_size, shuffle=True, seed=0)
    test_loader = ferry.Loader(test, batch_size=1000)

    net = model().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    start = time.perf_counter()
    samples = 0
    for e in range(a.epochs):
        samples += train_epoch(net, opt, ft.batches(loader, e, fields=("image", "label")), device)
    ferry_rate = samples / (time.perf_counter() - start)
    acc = accuracy(net, ft.batches(test_loader, 0, fields=("image", "label")), device)
    print(f"ferry: {a.epochs} epochs, {ferry_rate:,.0f} samples/s, test accuracy {acc:.4f}")
    print(f"ferry: {loader.stats().summary()}")

    if not a.no_torch_loader:
        images, labels = read_idx(f("train-images-idx3-ubyte.gz")), read_idx(f("train-labels-idx1-ubyte.gz"))
        dl = torch.utils.data.DataLoader(Arrays(images, labels), batch_size=a.batch_size,
                                         shuffle=True, num_workers=2,
                                         pin_memory=device.type == "cuda")
        net = model().to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        start = time.perf_counter()
        samples = 0
        for e in range(a.epochs):
            samples += train_epoch(net, opt, dl, device)
        torch_rate = samples / (time.perf_counter() - start)
        acc_t = accuracy(net, ft.batches(test_loader, 1, fields=("image", "label")), device)
        print(f"torch DataLoader (2 workers): {torch_rate:,.0f} samples/s, test accuracy {acc_t:.4f}")
        print(f"ferry / DataLoader: {ferry_rate / torch_rate:.2f}x")
    if a.png_folder:
        python_dataset_run(a.png_folder, a.epochs, a.batch_size, device, not a.no_torch_loader)
    if acc < 0.84:
        raise SystemExit(f"test accuracy {acc:.4f} is below 0.84")


if __name__ == "__main__":
    main()
