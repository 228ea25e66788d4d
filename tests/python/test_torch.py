# ferry.torch: batches as torch tensors, without a copy, in a DataLoader-style loop.
import numpy as np
import pytest

torch = pytest.importorskip("torch")


def test_batches_as_torch_tensors_share_the_batch(ferry):
    import ferry.torch as ft

    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    y = np.arange(20, dtype=np.int64)
    loader = ferry.Loader(ferry.TensorDataset({"x": x, "y": y}), batch_size=8, device="cpu")
    got = []
    for xb, yb in ft.batches(loader, 0, fields=("x", "y")):
        assert isinstance(xb, torch.Tensor) and xb.dtype == torch.float32
        assert torch.equal(xb, torch.from_numpy(x[yb.numpy()]))
        got.extend(yb.tolist())
    assert got == list(range(20))
    one = next(iter(ft.batches(loader, 1, fields=("y",))))
    assert torch.equal(one, torch.arange(8))
    d = next(iter(ft.batches(loader, 2, as_dict=True)))
    assert set(d) == {"x", "y"}


def test_drop_in_dataloader_plays_successive_epochs_and_resumes(ferry):
    import ferry.torch as ft

    ds = ferry.TensorDataset({"i": np.arange(30, dtype=np.int64)})
    dl = ft.DataLoader(ds, batch_size=4, shuffle=True, seed=1, device="cpu")
    assert len(dl) == 8
    e0 = [b.tolist() for b in dl]
    e1 = [b.tolist() for b in dl]
    assert e0 != e1 and sorted(sum(e0, [])) == list(range(30))
    dl.set_epoch(0)
    assert [b.tolist() for b in dl] == e0
    it = iter(ft.DataLoader(ds, batch_size=4, shuffle=True, seed=1, device="cpu"))
    dl2 = ft.DataLoader(ds, batch_size=4, shuffle=True, seed=1, device="cpu")
    it = iter(dl2)
    first = [next(it).tolist() for _ in range(3)]
    sd = dl2.state_dict()
    it.close()
    dl3 = ft.DataLoader(ds, batch_size=4, shuffle=True, seed=1, device="cpu")
    dl3.load_state_dict(sd)
    assert first + [b.tolist() for b in dl3] == e0


def test_a_torch_tensor_keeps_its_batch(ferry):
    import ferry.torch as ft

    loader = ferry.Loader(ferry.TensorDataset({"i": np.arange(16, dtype=np.int64)}), batch_size=4,
                          prefetch=4, device="cpu")
    kept = [b for b in ft.batches(loader, 0)][:2]
    assert [k.tolist() for k in kept] == [[0, 1, 2, 3], [4, 5, 6, 7]]
