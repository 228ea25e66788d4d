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


def _positional(loader):
    """Whether the loader's fields are a tuple's items ("0", "1", ...): a Python dataset whose
    __getitem__ gives tuples or lists."""
    names = [name for name, _, _ in loader.dataset.fields]
    return bool(names) and names == [str(i) for i in range(len(names))]


def _convert(batch, fields, as_dict, positional=False):
    names = list(batch.keys()) if fields is None else list(fields)
    if as_dict:
        return {n: to_torch(batch[n]) for n in names}
    out = tuple(to_torch(batch[n]) for n in names)
    # A dataset that gives tuples gets tuples back, one field too (as torch's DataLoader does).
    return out[0] if len(out) == 1 and not positional else out


def _with_rows(out, batch, ragged, pack):
    """A dict batch gets each ragged field's rows per sample (x_lengths, i64 [N]) and, packed,
    its samples' starts (x_offsets, i32 [N + 1]): what a padded batch's attention mask, or a
    packed one's cu_seqlens, is made from."""
    for name in ragged:
        if name in out:
            out[name + "_lengths"] = to_torch(batch.lengths(name))
            if pack:
                out[name + "_offsets"] = to_torch(batch.offsets(name))
    return out


def _dataloader_convert(batch, form, names, ragged, pack):
    if form == "single":
        return to_torch(batch[names[0]])
    if form == "dict" or (form == "declared" and names != [str(i) for i in range(len(names))]):
        return _with_rows({n: to_torch(batch[n]) for n in names}, batch, ragged, pack)
    out = [to_torch(batch[n]) for n in names]
    if form is None and len(out) == 1:
        return out[0]  # a ferry dataset's one field: the tensor
    return out  # a list, as torch's default_collate makes of tuple samples


def batches(loader, epoch=None, fields=None, as_dict=False):
    """Yields one epoch of `loader` as torch tensors: a tuple in `fields` order (every field
    when None), a single tensor for one field, or a dict with as_dict=True. epoch=None plays the
    loader's next epoch (iter(loader))."""
    ep = iter(loader) if epoch is None else loader.epoch(epoch)
    positional = fields is None and _positional(loader)
    try:
        for batch in ep:
            yield _convert(batch, fields, as_dict, positional)
    finally:
        ep.close()


# torch DataLoader keywords with no meaning in ferry, and what to use instead.
_INSTEAD = {
    "collate_fn": "ferry stacks each field itself (ragged first dimensions: ragged='pad' or "
                  "'pack'); return arrays from __getitem__, and change the batch in the loop",
    "sampler": "use shuffle= and seed= (and rank=/world_size= for several processes): ferry's "
               "order keeps resume exact",
    "batch_sampler": "use batch_size= (max_tokens= for batches by a token budget)",
}


class DataLoader:
    """torch.utils.data.DataLoader's signature over ferry: `for x, y in DataLoader(ds, 64)`.

    A Python dataset runs in num_workers worker processes (0: ferry's threads); ferry's own
    datasets read on its threads (num_workers sets how many). worker_init_fn, timeout,
    multiprocessing_context (the start method), prefetch_factor (staging slots per worker),
    generator (its initial_seed() is the seed), drop_last, shuffle and pin_memory mean what they
    mean in torch; persistent_workers is always true. collate_fn, sampler and batch_sampler have
    no meaning here: a TypeError says what to use instead. Further keyword arguments are
    ferry.Loader's (seed, device, on_error, ...); `fields` picks and orders the fields yielded
    (a tuple), as_dict=True yields dicts. Without a generator (or seed=), the seed is drawn from
    torch's default generator, so that torch.manual_seed decides the order, as in torch.

    A Python dataset's batches are as its samples: a dict sample gives a dict batch (a ragged
    field `x` with `x_lengths`, i64 [N], and under ragged="pack" `x_offsets`, i32 [N + 1]), a
    tuple a tuple, one array or tensor a tensor. A ferry dataset gives a tuple in its fields'
    order (one field: the tensor), but a table (ParquetDataset, ArrowDataset) and a dataset with
    a ragged field give dicts, with `x_lengths` as above.

    Every iter() plays the next epoch (0, 1, 2, ...); set_epoch(e) chooses it, as
    DistributedSampler.set_epoch does. state_dict() and load_state_dict() resume mid-epoch.

    dataset, batch_size, num_workers, drop_last, generator, pin_memory, timeout,
    worker_init_fn, prefetch_factor, persistent_workers and multiprocessing_context are as given,
    collate_fn and batch_sampler None, as torch's attributes; sampler is torch's
    SequentialSampler or RandomSampler (as shuffle) over the dataset: its len() is right, but
    iterating it does not give the loader's order.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 fields=None, as_dict=False, **options):
        for name, value in (("collate_fn", collate_fn), ("sampler", sampler),
                            ("batch_sampler", batch_sampler)):
            if value is not None:
                raise TypeError("ferry.torch.DataLoader: %s has no meaning here: %s"
                                % (name, _INSTEAD[name]))
        if isinstance(dataset, _torch.utils.data.IterableDataset):
            raise TypeError("ferry.torch.DataLoader: an IterableDataset (%s) has no __getitem__: "
                            "ferry reads samples by index, in its own order (shuffle, seed, "
                            "rank); give a map-style dataset (__len__ and __getitem__), or write "
                            "the stream as shards (ferry.WebDataset)" % type(dataset).__name__)
        if batch_size is None:
            raise TypeError("ferry.torch.DataLoader: batch_size=None (samples one by one) has "
                            "no meaning here: use batch_size=1")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("ferry.torch.DataLoader: num_workers is an int >= 0, not %r"
                             % (num_workers,))
        # torch's attributes, as given (persistent_workers: ferry's workers persist anyway).
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.drop_last = drop_last
        self.generator = generator
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.collate_fn = None
        self.batch_sampler = None
        # torch's sampler of the same kind (its len() is the loader's samples); ferry's
        # permutation, not this sampler's, orders the batches.
        sampling = _torch.utils.data
        self.sampler = (sampling.RandomSampler(dataset, generator=generator) if shuffle
                        else sampling.SequentialSampler(dataset))
        options.setdefault("shuffle", bool(shuffle))
        options.setdefault("drop_last", drop_last)
        options.setdefault("pin_memory", pin_memory)
        if generator is not None:
            options.setdefault("seed", generator.initial_seed())
        elif "seed" not in options:
            # As torch's sampler does: the order follows torch.manual_seed.
            options["seed"] = int(_torch.empty((), dtype=_torch.int64).random_().item())
        if prefetch_factor is not None:
            options.setdefault("prefetch", max(2, prefetch_factor * max(1, num_workers)))
        if isinstance(dataset, _ferry.Dataset):
            if num_workers > 0:
                options.setdefault("workers", num_workers)
        else:
            options.setdefault("processes", num_workers)
            options.setdefault("timeout", float(timeout))
            options.setdefault("worker_init_fn", worker_init_fn)
            if multiprocessing_context is not None:
                method = multiprocessing_context
                if not isinstance(method, str):
                    method = method.get_start_method()
                options.setdefault("start_method", method)
        self.loader = _ferry.Loader(dataset, batch_size=batch_size, **options)
        self.fields = fields
        self.as_dict = as_dict
        self._epoch = None
        self._live = None  # the epoch of the iterator under way, in a list (see _batches)
        dataset_fields = self.loader.dataset.fields
        self._form = _ferry._ferry._sample_form(self.loader.dataset)
        self._names = [name for name, _, _ in dataset_fields]
        self._ragged = [name for name, _, shape in dataset_fields if shape and shape[0] is None]
        if self._form is None and (self._ragged or isinstance(
                self.loader.dataset, (_ferry.ParquetDataset, _ferry.ArrowDataset))):
            # A table's rows are dicts (as ds[i] and Hugging Face give them), and a ragged
            # field's padding is told from its bytes only by its lengths: dict batches.
            self._form = "dict"
        self._pack = options.get("ragged", "pad") == "pack"

    def set_epoch(self, epoch):
        self._epoch = epoch

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        epoch, self._epoch = self._epoch, None
        if self.fields is not None:
            fields, as_dict = self.fields, self.as_dict
            positional = _positional(self.loader)
            return self._batches(epoch, lambda b: _convert(b, fields, as_dict, positional))
        form = "dict" if self.as_dict else self._form
        names, ragged, pack = self._names, self._ragged, self._pack
        return self._batches(epoch, lambda b: _dataloader_convert(b, form, names, ragged, pack))

    def _batches(self, epoch, convert):
        # ferry plays one epoch of a loader at a time. An iterator kept after its first batch
        # (`images, labels = next(iter(loader))`, then the training loop) would keep the next
        # epoch from starting: a newer iterator ends it, and it raises if used again.
        live, self._live = self._live, None
        if live:
            live.pop().close()
        ep = iter(self.loader) if epoch is None else self.loader.epoch(epoch)
        mine = self._live = [ep]  # emptied when a newer iterator ends this one
        try:
            for batch in ep:
                yield convert(batch)
                if not mine:
                    break
            if not mine:
                raise _ferry.ConfigError(
                    "ferry.torch.DataLoader: this iterator was ended by a newer iter() of the "
                    "same loader (ferry plays one epoch of a loader at a time; for two at once, "
                    "make two loaders)")
        finally:
            ep.close()
            if self._live is mine:
                self._live = None

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)

    def stats(self):
        return self.loader.stats()
