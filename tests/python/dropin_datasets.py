# The Python datasets of test_dropin.py, in a module that does not import torch: the worker
# processes import this module to unpickle them, and torch only where a dataset uses it.
import os

import numpy as np


class Single:
    """Sample i is one array (numpy, or a torch tensor): [i, 2i, 3i] f32."""

    def __init__(self, n, as_tensor=False):
        self.n = n
        self.as_tensor = as_tensor

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        a = np.array([i, 2 * i, 3 * i], np.float32)
        if not self.as_tensor:
            return a
        import torch  # noqa: PLC0415 (here: a worker process imports it only for this dataset)

        return torch.from_numpy(a)


class TorchWorker:
    """Sample i: its index and what torch.utils.data.get_worker_info() says in its process."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import torch  # noqa: PLC0415 (imported by the first sample, as a lazy dataset would)

        info = torch.utils.data.get_worker_info()
        seen = (-1, -1) if info is None else (info.id, info.num_workers)
        return {"i": np.int64(i), "worker": np.array(seen, np.int64)}


class Tokens:
    """Ragged "x" i32 [i % 4 + 1] = i, declared; "y" = i."""

    fields = [("x", "i32", (None,)), ("y", "i64", ())]

    def __len__(self):
        return 12

    def length(self, index, field):
        return index % 4 + 1

    def __getitem__(self, i):
        return {"x": np.full(i % 4 + 1, i, np.int32), "y": i}


class OpensOnFirstUse:
    """The torch idiom: the file is opened by the first __getitem__ (in whichever process), and
    the dataset then holds it open (it no longer pickles). Declares its fields, so the training
    process never calls __getitem__; sample i is the i-th 4 bytes of the file, and the pid that
    read it."""

    fields = [("v", "u8", (4,)), ("pid", "i64", ())]

    def __init__(self, path, n):
        self.path = path
        self.n = n
        self.file = None
        self.trainer = os.getpid()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.file is None:
            self.file = open(self.path, "rb")  # noqa: SIM115
        self.file.seek(4 * i)
        return {"v": np.frombuffer(self.file.read(4), np.uint8), "pid": os.getpid()}


class Uneven:
    """Sample i: {"a": i, "b": i} f32, but sample 5 lacks "b" (kind="lacks") or is a tuple
    (kind="tuple")."""

    def __init__(self, kind):
        self.kind = kind

    def __len__(self):
        return 8

    def __getitem__(self, i):
        a = np.float32(i)
        if i != 5:
            return {"a": a, "b": a}
        return {"a": a} if self.kind == "lacks" else (a, a)


class Bf16:
    """Sample i: {"h": a bf16 torch tensor [3] = i + 0.5, i + 1, i + 2, "y": i}; from sample
    `f32_from` on, "h" is an f32 tensor of the same values."""

    def __init__(self, n, f32_from=None):
        self.n = n
        self.f32_from = n if f32_from is None else f32_from

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch  # noqa: PLC0415 (a worker process imports it only for this dataset)

        h = torch.tensor([i + 0.5, i + 1, i + 2], dtype=torch.float32)
        return {"h": h if i >= self.f32_from else h.to(torch.bfloat16), "y": i}


class FailsBelow:
    """Sample i: {"x": [i] i64}, raising ValueError for every i < `bad` (sample 0 too)."""

    def __init__(self, n, bad):
        self.n = n
        self.bad = bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i < self.bad:
            raise ValueError(f"bad sample {i}")
        return {"x": np.array([i], np.int64)}


class Draws:
    """Sample i: a draw of Python's random, numpy's global generator and torch's (where torch
    is imported), as f64 [3]."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import random  # noqa: PLC0415

        import sys  # noqa: PLC0415

        torch = sys.modules.get("torch")
        t = float(torch.rand(1)[0]) if torch is not None else 0.0
        return {"r": np.array([random.random(), np.random.rand(), t])}


class Grad:
    """Sample i: "x", a torch tensor [3] of i that requires grad (a model's output, say)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        import torch  # noqa: PLC0415

        return {"x": torch.ones(3, requires_grad=True) * i}
