# ferry.torch.DataLoader as a drop-in for torch's (dict and one-array samples, list(loader),
# torch.manual_seed, torch's get_worker_info, a ragged field's lengths, the type stubs), and
# Python datasets shared or declared: a Mixture under several loaders, a dataset that declares
# its fields and opens its file on first use. Real worker processes; the datasets are defined at
# module level, so that the processes can unpickle them.
import ast
import os
import pathlib

import numpy as np
import pytest
from conftest import Indexed, expected_x
from dropin_datasets import (Bf16, Draws, FailsBelow, Grad, OpensOnFirstUse, Single, Tokens,
                             TorchWorker, Uneven)

torch = pytest.importorskip("torch")


def dataloader(ds, **options):
    import ferry.torch as ft

    options.setdefault("device", "cpu")
    return ft.DataLoader(ds, **options)


# ---- drop-in -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_samples_give_dict_batches(ferry, workers):
    batches = list(dataloader(Indexed(10), batch_size=4, num_workers=workers))
    assert all(isinstance(b, dict) and set(b) == {"x", "y"} for b in batches)
    ys = [int(v) for b in batches for v in b["y"]]
    assert ys == list(range(10))
    for b in batches:
        for row, y in zip(b["x"], b["y"]):
            assert torch.equal(row.to(torch.int64), torch.from_numpy(expected_x(int(y))))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_a_sample_that_is_one_array_gives_a_tensor_batch(ferry, workers, as_tensor):
    batches = list(dataloader(Single(7, as_tensor), batch_size=3, num_workers=workers))
    assert all(isinstance(b, torch.Tensor) for b in batches)
    got = torch.cat(batches)
    want = torch.tensor([[i, 2 * i, 3 * i] for i in range(7)], dtype=torch.float32)
    assert got.shape == (7, 3) and torch.equal(got, want)



def test_an_iterable_dataset_is_a_type_error_saying_what_to_do(ferry):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match=r"an IterableDataset \(Stream\).*map-style.*WebDataset"):
        dataloader(Stream(), batch_size=2)


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_dataloaders_attributes_are_torchs(ferry, shuffle):
    ds = Indexed(10)
    gen = torch.Generator().manual_seed(3)
    init = print
    dl = dataloader(ds, batch_size=4, shuffle=shuffle, num_workers=2, drop_last=True,
                    generator=gen, timeout=5, worker_init_fn=init, prefetch_factor=3)
    assert dl.dataset is ds and len(dl.dataset) == 10
    assert (dl.batch_size, dl.num_workers, dl.drop_last) == (4, 2, True)
    assert dl.generator is gen and dl.timeout == 5 and dl.worker_init_fn is init
    assert (dl.prefetch_factor, dl.pin_memory, dl.collate_fn) == (3, False, None)
    assert dl.persistent_workers is False
    kind = torch.utils.data.RandomSampler if shuffle else torch.utils.data.SequentialSampler
    assert type(dl.sampler) is kind and len(dl.sampler) == 10
    assert dl.sampler.data_source is ds
    if shuffle:
        assert dl.sampler.generator is gen
    assert len(dl) == 2
    plain = dataloader(ds)
    assert (plain.batch_size, plain.num_workers, plain.drop_last, plain.generator) == (
        1, 0, False, None)
    assert plain.prefetch_factor is None and type(plain.sampler) is torch.utils.data.SequentialSampler


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["lacks", "tuple"])
def test_a_later_sample_of_another_form_is_a_data_error(ferry, workers, kind):
    import ferry as f  # noqa: PLC0415

    with pytest.raises(f.DataError, match='sample 5.*"b"' if kind == "lacks" else "sample 5"):
        list(dataloader(Uneven(kind), batch_size=2, num_workers=workers))


@pytest.mark.parametrize("workers", [0, 2])
def test_bf16_tensors_are_read_bit_for_bit(ferry, workers):
    batches = list(dataloader(Bf16(6), batch_size=3, num_workers=workers))
    h = torch.cat([b["h"] for b in batches])
    assert h.dtype == torch.bfloat16
    want = torch.tensor([[i + 0.5, i + 1, i + 2] for i in range(6)]).to(torch.bfloat16)
    assert torch.equal(h.view(torch.int16), want.view(torch.int16))
    assert torch.equal(torch.cat([b["y"] for b in batches]), torch.arange(6))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_later_f32_value_of_a_bf16_field_is_a_data_error_naming_it(ferry, workers):
    import ferry as f  # noqa: PLC0415

    with pytest.raises(f.DataError, match='field "h" of sample 4'):
        list(dataloader(Bf16(6, f32_from=4), batch_size=2, num_workers=workers))


def test_list_of_a_loader_and_every_label_kept(ferry):
    # More batches than staging slots: each kept batch's slot is replaced by a new one.
    dl = dataloader(Indexed(40), batch_size=2, num_workers=2, prefetch_factor=1)
    batches = list(dl)
    assert [int(v) for b in batches for v in b["y"]] == list(range(40))
    labels = [b["y"] for b in dl]  # the metric idiom: every label tensor kept
    assert torch.equal(torch.cat(labels), torch.arange(40))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_kept_after_its_first_batch_does_not_block_the_next_epoch(ferry, workers):
    # torch's tutorial: `dataiter = iter(loader); images, labels = next(dataiter)` to look at a
    # batch, then the training loop over the same loader (ConfigError "an epoch is still being
    # iterated" before). The newer iterator ends the kept one, which raises if used again.
    loader = dataloader(Indexed(20), batch_size=4, num_workers=workers)
    dataiter = iter(loader)
    assert [int(v) for v in next(dataiter)["y"]] == [0, 1, 2, 3]
    for _ in range(2):
        assert [int(v) for b in loader for v in b["y"]] == list(range(20))
    with pytest.raises(ferry.ConfigError, match="ended by a newer iter"):
        next(dataiter)
    with pytest.raises(ferry.ConfigError, match="ended by a newer iter"):
        list(zip(loader, loader))  # two at once: said, not an empty loop


def test_torch_manual_seed_decides_the_order(ferry):
    def order(seed):
        torch.manual_seed(seed)
        return [int(v) for b in dataloader(Indexed(24), batch_size=6, shuffle=True, as_dict=True)
                for v in b["y"]]

    a, b, c = order(1), order(1), order(2)
    assert a == b and sorted(a) == list(range(24))
    assert a != c and a != sorted(a)


def test_torch_get_worker_info_answers_in_the_workers(ferry):
    assert torch.utils.data.get_worker_info() is None
    batches = list(dataloader(TorchWorker(), batch_size=4, num_workers=2, as_dict=True))
    seen = torch.cat([b["worker"] for b in batches])
    assert set(seen[:, 1].tolist()) == {2}
    assert set(seen[:, 0].tolist()) <= {0, 1} and len(seen) == 16
    threads = list(dataloader(TorchWorker(), batch_size=4, num_workers=0, as_dict=True))
    assert set(torch.cat([b["worker"] for b in threads]).flatten().tolist()) == {-1}


@pytest.mark.parametrize("ragged", ["pad", "pack"])
def test_a_ragged_field_comes_with_its_lengths(ferry, ragged):
    batches = list(dataloader(Tokens(), batch_size=5, num_workers=2, ragged=ragged, as_dict=True))
    for b in batches:
        ys = b["y"].tolist()
        assert b["x_lengths"].tolist() == [y % 4 + 1 for y in ys]
        if ragged == "pad":
            assert "x_offsets" not in b
            mask = torch.arange(b["x"].shape[1])[None, :] < b["x_lengths"][:, None]
            assert torch.equal(b["x"][mask], torch.cat([torch.full((y % 4 + 1,), y) for y in ys])
                               .to(torch.int32))
        else:
            starts = [0]
            for y in ys:
                starts.append(starts[-1] + y % 4 + 1)
            assert b["x_offsets"].tolist() == starts


def test_the_type_stubs_name_every_public_name(ferry):
    here = pathlib.Path(ferry.__file__).parent
    declared = set()
    for stub in ("_ferry.pyi", "_worker.pyi"):
        tree = ast.parse((here / stub).read_text())
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                declared.add(node.name)
            elif isinstance(node, ast.AnnAssign):
                declared.add(node.target.id)
    assert {"WorkerInfo", "worker_info"} <= declared
    assert set(ferry.__all__) - declared == set()


# ---- a dataset that declares its fields: the training process reads no sample -----------------


def test_declared_fields_are_not_read_in_the_training_process(ferry, tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(48)))
    ds = OpensOnFirstUse(str(path), 12)
    loader = ferry.Loader(ds, batch_size=4, processes=2, device="cpu")
    assert ds.file is None  # still picklable: nothing was read here
    got = [(b["v"].numpy().copy(), b["pid"].numpy().copy()) for b in loader.epoch(0)]
    assert np.array_equal(np.concatenate([v for v, _ in got]), np.arange(48, dtype=np.uint8)
                          .reshape(12, 4))
    assert os.getpid() not in set(np.concatenate([p for _, p in got]).tolist())
    assert "2 worker processes" in loader.stats().summary()


# ---- one Mixture under several loaders: each loader its own reads --------------------------


def mixture(ferry):
    return ferry.Mixture([(Indexed(20), 1.0), (Indexed(12), 1.0)])


def epoch_ys(loader, epoch=0):
    return [int(v) for b in loader.epoch(epoch) for v in b["y"].numpy()]


def test_a_mixture_feeds_loaders_with_different_seeds(ferry):
    mix = mixture(ferry)
    a = ferry.Loader(mix, batch_size=4, shuffle=True, seed=1, processes=2, device="cpu")
    b = ferry.Loader(mix, batch_size=4, shuffle=True, seed=2, processes=2, device="cpu")
    ya, yb = epoch_ys(a), epoch_ys(b)
    assert len(ya) == len(yb) == 32 and ya != yb
    solo = ferry.Loader(mixture(ferry), batch_size=4, shuffle=True, seed=2, processes=0,
                        device="cpu")
    assert yb == epoch_ys(solo)


def test_leaving_one_loaders_loop_leaves_the_other_alone(ferry):
    mix = mixture(ferry)
    a = ferry.Loader(mix, batch_size=4, processes=2, device="cpu")
    b = ferry.Loader(mix, batch_size=4, processes=2, device="cpu")
    eb = b.epoch(0)
    first = [int(v) for v in next(eb)["y"].numpy()]
    ea = a.epoch(0)
    next(ea)
    ea.close()  # left early: a's reads are abandoned, not b's
    rest = [int(v) for batch in eb for v in batch["y"].numpy()]
    assert first + rest == epoch_ys(ferry.Loader(mixture(ferry), batch_size=4, processes=0,
                                                 device="cpu"))


def test_a_threads_loader_after_a_processes_loader_is_gone(ferry):
    mix = mixture(ferry)
    a = ferry.Loader(mix, batch_size=4, processes=2, device="cpu")
    want = epoch_ys(a)
    del a
    b = ferry.Loader(mix, batch_size=4, processes=0, device="cpu")
    assert epoch_ys(b) == want


# ---- interpreter exit while daemon threads iterate loaders ----------------------------------

EXIT_SCRIPT = """
import sys, threading
sys.path.insert(0, {here!r})
import numpy as np
import ferry
from conftest import Indexed

started = [threading.Event() for _ in range(4)]


def python_loop(k, processes):
    while True:  # loaders made, iterated and dropped on this thread until the interpreter exits
        loader = ferry.Loader(Indexed(400), batch_size=8, processes=processes, device="cpu")
        for _ in loader.epoch(0):
            started[k].set()
        del loader


def kept_tensors(k):
    while True:
        loader = ferry.Loader(ferry.TensorDataset({{"a": np.arange(1000.0)}}), batch_size=10,
                              device="cpu")
        kept = [b["a"] for b in loader.epoch(0)]
        started[k].set()
        del loader, kept


if __name__ == "__main__":
    for k, target, args in ((0, python_loop, (0, 0)), (1, python_loop, (1, 0)),
                            (2, python_loop, (2, 1)), (3, kept_tensors, (3,))):
        threading.Thread(target=target, args=args, daemon=True).start()
    for event in started:
        event.wait()
    print("exiting", flush=True)
"""


def test_interpreter_exit_while_daemon_threads_iterate_loaders(tmp_path):
    # Each run leaves the interpreter while four daemon threads make, iterate and drop loaders (a
    # Python dataset on threads and in a worker process, numpy arrays kept): none may abort or
    # crash. Before the fix about one run in five did (PyGILState_Release, SIGABRT, SIGSEGV).
    import subprocess
    import sys

    script = tmp_path / "exit.py"
    script.write_text(EXIT_SCRIPT.format(here=os.path.dirname(os.path.abspath(__file__))))
    runs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(6)]
    failures = []
    for proc in runs:
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        if proc.returncode != 0 or "exiting" not in out:
            failures.append((proc.returncode, err[-2000:]))
    assert failures == []


@pytest.mark.parametrize("processes", [0, 2])
def test_a_first_sample_that_raises_is_met_again_in_the_epoch(ferry, processes):
    # The fields come from the first sample that reads (sample 2 here); samples 0 and 1 raise
    # in the epoch, as any other sample, under on_error (the loader could not be made before).
    skip = ferry.Loader(FailsBelow(10, 2), batch_size=4, device="cpu", processes=processes,
                        on_error="skip")
    assert [int(v) for b in skip for v in np.from_dlpack(b["x"]).ravel()] == list(range(2, 10))
    assert skip.stats().skipped == 2
    loader = ferry.Loader(FailsBelow(10, 2), batch_size=4, device="cpu", processes=processes)
    with pytest.raises(ValueError, match="bad sample 0") as raised:
        list(loader)
    assert raised.value.ferry_sample == 0


def test_a_dataset_whose_first_samples_all_raise_names_sample_0(ferry):
    with pytest.raises(ValueError, match="bad sample 0") as raised:
        ferry.Loader(FailsBelow(40, 40), batch_size=4, device="cpu")
    assert raised.value.ferry_sample == 0
    assert any("learn the dataset's fields" in n for n in raised.value.__notes__)


def test_making_a_loader_leaves_the_trainers_generators_as_they_were(ferry):
    import random

    def draws():
        return random.random(), np.random.rand(), float(torch.rand(1)[0])

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    want = draws()
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    ferry.Loader(Draws(), batch_size=4, device="cpu", processes=2)
    assert draws() == want


@pytest.mark.parametrize("processes", [0, 2])
def test_a_tensor_that_requires_grad_is_read_detached(ferry, processes):
    # numpy refuses it ("Can't call numpy() on Tensor that requires grad"): the loader could
    # not be made, with torch's RuntimeError.
    loader = ferry.Loader(Grad(), batch_size=2, device="cpu", processes=processes)
    got = [b["x"].numpy().tolist() for b in loader]
    assert got == [[[0.0] * 3, [1.0] * 3], [[2.0] * 3, [3.0] * 3]]
