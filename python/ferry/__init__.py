"""ferry: batches already on their device, read and batched on threads, not worker processes.

    import ferry
    ds = ferry.ImageFolder("train", height=224, width=224)
    loader = ferry.Loader(ds, batch_size=256, shuffle=True)      # device: cuda:0 if usable, else cpu
    for epoch in range(10):
        for batch in loader.epoch(epoch):
            x = torch.from_dlpack(batch["image"])                  # no copy

Datasets: TensorDataset (numpy, torch or any DLPack arrays, no copy), CsvDataset, IdxDataset,
ImageFolder, TokenDataset, WebDataset, ParquetDataset, Mixture (weighted mixing of datasets), and any Python
object with __len__ and __getitem__(i) returning a dict of arrays. ferry.torch yields torch tensors directly.
"""

import atexit as _atexit
import collections.abc as _abc
import os as _os

from ._ferry import (  # noqa: F401  (the public names)
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
from . import _ferry

__all__ = [
    "Batch", "ConfigError", "CsvDataset", "DataError", "Dataset", "Device", "DeviceError",
    "Epoch", "Error", "IdxDataset", "ImageFolder", "Loader", "LoaderStats", "Mixture", "Normalize", "ParquetDataset",
    "RemoteOptions",
    "Tensor",
    "TensorDataset", "TokenDataset", "WebDataset", "built_with_cuda", "cuda_device_count",
    "cuda_is_available", "cuda_unavailable_reason", "empty", "expand_braces", "from_dlpack", "zeros",
]

# Epochs still running at interpreter exit are stopped before it finalizes: a worker reading a
# Python dataset must not wait for the GIL then.
_atexit.register(_ferry._stop_all)
# A child of os.fork() starts clean: the parent's loaders and epochs are forgotten there (their
# threads exist only in the parent) and refuse use with a ConfigError; new ones work.
_os.register_at_fork(after_in_child=_ferry._after_fork_in_child)
# A batch is a read-only mapping of field name to tensor: .get, ==, keys/values/items.
_abc.Mapping.register(Batch)
