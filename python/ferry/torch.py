"""ferry's batches as torch tensors: the drop-in for a torch DataLoader loop.

    import ferry, ferry.torch
    loader = ferry.Loader(ferry.IdxDataset(images, labels), batch_size=256, shuffle=True)
    for epoch in range(10):
        for x, y in ferry.torch.batches(loader, epoch, fields=("image", "label")):
            ...

Tensors go over DLPack without a copy. On a GPU, torch.from_dlpack makes torch's current
stream wait for the batch's copy, on the GPU: the host never waits. A torch tensor keeps its
batch's buffer until torch lets go of it.
"""

import torch as _torch

import ferry as _ferry

__all__ = ["batches", "DataLoader", "to_torch"]


def to_torch(tensor):
    """A ferry.Tensor as a torch tensor sharing its memory (torch.from_dlpack)."""
    return _torch.utils.dlpack.from_dlpack(tensor)


def _convert(batch, fields, as_dict):
    names = list(batch.keys()) if fields is None else list(fields)
    if as_dict:
        return {n: to_torch(batch[n]) for n in names}
    out = tuple(to_torch(batch[n]) for n in names)
    return out[0] if len(out) == 1 else out


def batches(loader, epoch=None, fields=None, as_dict=False):
    """Yields one epoch of `loader` as torch tensors: a tuple in `fields` order (every field
    when None), a single tensor for one field, or a dict with as_dict=True. epoch=None plays the
    loader's next epoch (iter(loader))."""
    ep = iter(loader) if epoch is None else loader.epoch(epoch)
    try:
        for batch in ep:
            yield _convert(batch, fields, as_dict)
    finally:
        ep.close()


class DataLoader:
    """A torch-style loader over any ferry dataset: `for x, y in DataLoader(ds, batch_size=64)`.

    Every iter() plays the next epoch (0, 1, 2, ...); set_epoch(e) chooses it, as
    DistributedSampler.set_epoch does. Keyword arguments are ferry.Loader's; `fields` picks and
    orders the fields yielded. state_dict() and load_state_dict() resume mid-epoch.
    """

    def __init__(self, dataset, fields=None, as_dict=False, **options):
        self.loader = _ferry.Loader(dataset, **options)
        self.fields = fields
        self.as_dict = as_dict
        self._epoch = None

    def set_epoch(self, epoch):
        self._epoch = epoch

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        epoch, self._epoch = self._epoch, None
        return batches(self.loader, epoch, self.fields, self.as_dict)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def stats(self):
        return self.loader.stats()
