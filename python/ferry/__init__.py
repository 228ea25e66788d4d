"""ferry: batches already on their device, read and batched on ferry's threads.

    import ferry
    ds = ferry.ImageFolder("train", height=224, width=224)
    loader = ferry.Loader(ds, batch_size=256, shuffle=True)      # device: cuda:0 if usable, else cpu
    for epoch in range(10):
        for batch in loader.epoch(epoch):
            x = torch.from_dlpack(batch["image"])                  # no copy

Datasets: TensorDataset (numpy, torch or any DLPack arrays, no copy), CsvDataset, IdxDataset,
ImageFolder, AudioFolder, TokenDataset, WebDataset, ParquetDataset, ArrowDataset, Mixture (weighted mixing of datasets), and any Python
object with __len__ and __getitem__(i) returning a dict (or tuple) of arrays, run in worker processes
(Loader(processes=...)) or on ferry's threads. ferry.torch yields torch tensors directly.
"""

import atexit as _atexit
import collections.abc as _abc
import os as _os
import sys as _sys

from ._ferry import (  # noqa: F401  (the public names)
    ArrowDataset,
    AudioFolder,
    Batch,
    ConfigError,
    CsvDataset,
    DataError,
    Dataset,
    Device,
    DeviceError,
    Epoch,
    Error,
    IdxDataset,
    ImageFolder,
    Loader,
    LoaderStats,
    Mixture,
    Normalize,
    ParquetDataset,
    RemoteOptions,
    Tensor,
    TensorDataset,
    TokenDataset,
    VideoFolder,
    WebDataset,
    __version__,
    built_with_cuda,
    cuda_device_count,
    cuda_is_available,
    cuda_unavailable_reason,
    default_memory_budget,
    empty,
    expand_braces,
    from_dlpack,
    zeros,
)
from . import _arguments, _ferry
from ._worker import WorkerInfo, worker_info  # noqa: F401

__all__ = [
    "ArrowDataset", "AudioFolder", "Batch", "ConfigError", "CsvDataset", "DataError", "Dataset", "Device", "DeviceError",
    "Epoch", "Error", "IdxDataset", "ImageFolder", "Loader", "LoaderStats", "Mixture", "Normalize", "ParquetDataset",
    "RemoteOptions",
    "Tensor",
    "TensorDataset", "TokenDataset", "VideoFolder", "WebDataset", "built_with_cuda", "cuda_device_count",
    "cuda_is_available", "cuda_unavailable_reason", "empty", "expand_braces", "from_dlpack", "zeros",
    "WorkerInfo", "worker_info",
]

# A constructor call that pybind11 refuses (a wrong type, an unknown keyword, an option given by
# position) raises an error naming the argument and what it takes, not the whole signature.
for _cls in (ArrowDataset, AudioFolder, CsvDataset, Device, IdxDataset, ImageFolder, Loader,
             Mixture, Normalize, ParquetDataset, RemoteOptions, TensorDataset, TokenDataset,
             VideoFolder, WebDataset):
    _arguments.check_constructor(_cls, _sys.modules[__name__])
del _cls

# Epochs still running at interpreter exit are stopped before it finalizes: a worker reading a
# Python dataset must not wait for the GIL then.
_atexit.register(_ferry._stop_all)
# A child of os.fork() starts clean: the parent's loaders and epochs are forgotten there (their
# threads exist only in the parent) and refuse use with a ConfigError; new ones work.
_os.register_at_fork(after_in_child=_ferry._after_fork_in_child)


# ferry's workers seed numpy's global generator before each sample of a Python dataset; its lock
# (a threading.Lock) may be held by one of them, between two bytecodes, when another thread
# forks. The fork waits for it, so that the child does not inherit it held for ever.
def _numpy_random_lock():
    mtrand = _sys.modules.get("numpy.random.mtrand")
    generator = getattr(getattr(mtrand, "_rand", None), "_bit_generator", None)
    return getattr(generator, "lock", None)


_held = []


def _before_fork():
    lock = _numpy_random_lock()
    if lock is not None and lock.acquire(timeout=5):
        _held.append(lock)


def _after_fork():
    while _held:
        _held.pop().release()


_os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                     after_in_child=_after_fork)
# A batch is a read-only mapping of field name to tensor: .get, ==, keys/values/items.
_abc.Mapping.register(Batch)
