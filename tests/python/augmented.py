"""A Python dataset that draws from torch's generator, in a module of its own: the worker
processes of test_pyworkers.py's other datasets do not import torch (2-3 s a process under
ASan); these import it when they unpickle the dataset, before its first sample is seeded."""
import random

import numpy as np

try:  # draws from torch's generator too, where torch is installed
    import torch
except ImportError:
    torch = None


class Augmented:
    """Sample i: its index, and draws from random, numpy's global generator and (if imported)
    torch's, as a random augmentation would make them."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        draws = [random.random(), np.random.rand(), np.random.randint(1 << 30),
                 float(torch.rand(1)) if torch is not None else 0.0]
        return {"i": np.int64(i), "draws": np.array(draws, np.float64)}
