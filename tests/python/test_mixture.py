# ferry.Mixture from Python: exact shares per epoch, the source field, per-source counts in the
# stats, resume, and what it refuses.
from collections import Counter

import numpy as np
import pytest
from conftest import Indexed


def test_mixture_epochs_hold_exact_shares(ferry):
    a = ferry.TensorDataset({"i": np.arange(30, dtype=np.int64)})
    b = ferry.TensorDataset({"i": np.arange(100, 105, dtype=np.int64)})
    mix = ferry.Mixture([(a, 1.0), (b, 3.0)], epoch_size=40, source_field="source")
    assert len(mix) == 35 and mix.epoch_size == 40 and mix.shares == [10, 30]
    assert mix.num_sources == 2 and mix.offset(1) == 30 and mix.source_of(31) == 1
    assert [f[0] for f in mix.fields] == ["i", "source"]
    loader = ferry.Loader(mix, batch_size=7, shuffle=True, seed=3, device="cpu")
    got = []
    for batch in loader.epoch(1):
        idx = batch.indices
        src = batch["source"].numpy()
        np.testing.assert_array_equal(src, [mix.source_of(int(i)) for i in idx])
        values = batch["i"].numpy()
        np.testing.assert_array_equal(values, np.where(idx < 30, idx, idx - 30 + 100))
        got.extend(idx.tolist())
    assert Counter(got) == Counter(mix.epoch_indices(3, 1))
    counts = Counter(got)
    assert all(counts[i] == 6 for i in range(30, 35))  # up-sampled: each 30 / 5 times
    assert loader.stats().source_samples == [10, 30]


def test_mixture_of_python_datasets_resumes(ferry):
    mix = ferry.Mixture([(Indexed(20), 1), (Indexed(50), 1)], epoch_size=30)
    opts = dict(batch_size=4, shuffle=True, seed=2, device="cpu", workers=2)
    whole = [list(b.indices) for b in ferry.Loader(mix, **opts).epoch(0)]
    loader = ferry.Loader(mix, **opts)
    ep = loader.epoch(0)
    first = [list(next(ep).indices) for _ in range(3)]
    state = loader.state()
    assert " selection=" in state
    ep.close()
    rest = [list(b.indices) for b in ferry.Loader(mix, **opts).resume(state)]
    assert first + rest == whole
    other = ferry.Mixture([(Indexed(20), 2), (Indexed(50), 1)], epoch_size=30)
    with pytest.raises(ferry.ConfigError, match="selection"):
        ferry.Loader(other, **opts).resume(state)


def test_mixture_refuses_what_cannot_mix(ferry):
    a = ferry.TensorDataset({"i": np.arange(3, dtype=np.int64)})
    b = ferry.TensorDataset({"i": np.arange(3, dtype=np.float32)})
    with pytest.raises(ferry.ConfigError, match="source 1.*dtype f32"):
        ferry.Mixture([(a, 1), (b, 1)])
    with pytest.raises(ferry.ConfigError, match="positive and finite"):
        ferry.Mixture([(a, 1), (a, 0)])
    with pytest.raises(ferry.ConfigError, match="no sources"):
        ferry.Mixture([])


def test_stratified_mixture_batches_hold_each_share(ferry):
    a = ferry.TensorDataset({"i": np.arange(40, dtype=np.int64)})
    b = ferry.TensorDataset({"i": np.arange(10, dtype=np.int64)})
    mix = ferry.Mixture([(a, 3), (b, 1)], epoch_size=48, stratified=8)
    assert mix.shares == [36, 12]
    loader = ferry.Loader(mix, batch_size=8, shuffle=True, seed=1, device="cpu")
    got = []
    for batch in loader.epoch(0):
        sources = Counter(mix.source_of(int(i)) for i in batch.indices)
        assert sources == Counter({0: 6, 1: 2})
        got.extend(batch.indices.tolist())
    assert Counter(got) == Counter(mix.epoch_indices(1, 0))
