# Python datasets in worker processes (processes=, start_method=, worker_init_fn=, timeout=,
# seed_python=, ferry.worker_info()), and what a torch DataLoader user brings along: tuples,
# DataLoader's keywords, seeded augmentation, ragged fields, datasets that cannot be pickled.
# Real processes, real kills, real timeouts. The datasets are defined at module level, so that
# the worker processes can unpickle them.
import gc
import os
import platform
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import Indexed, expected_x


def Augmented(n):  # noqa: N802 (augmented.py's class, imported where a test uses it)
    """augmented.Augmented(n). Not imported at the top: a worker process imports this module to
    unpickle the datasets defined here (Dying, Slow, ...), and augmented.py imports torch (1-2 s
    a process, several under ASan)."""
    from augmented import Augmented as made  # noqa: PLC0415

    return made(n)


class Pairs:
    """Tuples, as most torch datasets give them: (image u8 [2, 3], label)."""

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return np.full((2, 3), i, np.uint8), i


class WhoReads:
    """Sample i: its index, the reading process's pid, and worker_info()'s id, count and seed."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        import ferry

        info = ferry.worker_info()
        fields = (-1, -1, -1) if info is None else (info.id, info.count, info.seed % (1 << 62))
        return {"i": np.int64(i), "pid": np.int64(os.getpid()),
                "info": np.array(fields, np.int64),
                "init": np.int64(getattr(sys.modules[__name__], "INITIALIZED", -1))}


def initialize(worker_id):
    sys.modules[__name__].INITIALIZED = 100 + worker_id


class Dying(Indexed):
    """Sample `victim` ends its process: os._exit(code), or a signal."""

    def __init__(self, n, victim, how):
        super().__init__(n)
        self.victim = victim
        self.how = how

    def __getitem__(self, i):
        if i == self.victim:
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


class Slow(Indexed):
    def __init__(self, n, slow, seconds):
        super().__init__(n)
        self.slow = slow
        self.seconds = seconds

    def __getitem__(self, i):
        if i in self.slow:
            time.sleep(self.seconds)
        return super().__getitem__(i)


def failing_deep(i):
    raise KeyError(f"label of {i} is missing")


class Failing(Indexed):
    def __getitem__(self, i):
        if i == 9:
            failing_deep(i)
        return super().__getitem__(i)


class Tokens:
    """Ragged: "tokens" i32 [L] with L = i % 5 + 1, declared as ferry's own datasets do."""

    fields = [("tokens", "i32", (None,)), ("y", "i64", ())]

    def __len__(self):
        return 30

    def length(self, index, field):
        assert field == "tokens"
        return index % 5 + 1

    def max_length(self, field):
        return 5

    def __getitem__(self, i):
        return {"tokens": np.arange(i % 5 + 1, dtype=np.int32) + i, "y": i}


def batches_of(ferry, dataset, epoch=0, **options):
    options.setdefault("device", "cpu")
    options.setdefault("batch_size", 8)
    loader = ferry.Loader(dataset, **options)
    out = [{k: b[k].numpy().copy() for k in b.keys()} for b in loader.epoch(epoch)]
    return out, loader


# ---- the same results, whatever the processes -------------------------------------------------


def test_processes_give_the_same_batches_bit_for_bit_as_threads(ferry):
    pytest.importorskip("torch")  # torch's generator is seeded too, where torch is imported
    runs = {}
    for processes in (0, 1, 3):
        runs[processes], loader = batches_of(ferry, Augmented(50), epoch=2, shuffle=True, seed=7,
                                             processes=processes)
        if processes:
            assert f"runs in {processes} worker process" in loader.stats().summary()
    order = [int(i) for b in runs[0] for i in b["i"]]
    assert sorted(order) == list(range(50)) and order != list(range(50))
    for processes in (1, 3):
        assert len(runs[processes]) == len(runs[0])
        for a, b in zip(runs[0], runs[processes]):
            assert np.array_equal(a["i"], b["i"]) and np.array_equal(a["draws"], b["draws"])
    # the draws differ between samples (seeded per sample, not once)
    draws = np.concatenate([b["draws"] for b in runs[0]])
    assert len(np.unique(draws[:, 0])) == 50
    # and each generator its own seed: random's and numpy's draws differ
    assert not np.isin(draws[:, 0], draws[:, 1]).any()


def test_spawn_gives_the_same_batches(ferry):
    a, _ = batches_of(ferry, Augmented(20), shuffle=True, seed=3, processes=2)
    b, _ = batches_of(ferry, Augmented(20), shuffle=True, seed=3, processes=2, start_method="spawn")
    assert all(np.array_equal(x["draws"], y["draws"]) for x, y in zip(a, b))


def test_seed_python_false_leaves_the_generators_alone(ferry):
    random.seed(1)
    a, _ = batches_of(ferry, Augmented(16), processes=0, seed_python=False)
    b, _ = batches_of(ferry, Augmented(16), processes=0, seed_python=False)
    assert not np.array_equal(a[0]["draws"][:, 0], b[0]["draws"][:, 0])
    c, _ = batches_of(ferry, Augmented(16), processes=0)
    d, _ = batches_of(ferry, Augmented(16), processes=0)
    assert np.array_equal(c[0]["draws"], d[0]["draws"])


class Sometimes:
    """Sample i: its index and a draw of `random` where i % 5 == 3, numpy's global generator where
    i % 7 == 4 (0 elsewhere), after appending its index to the file `log` (one line a call). Its
    fields are declared: the training process reads no sample to learn them."""

    fields = [("i", "i64", ()), ("r", "f64", (2,))]

    def __init__(self, log, n=40):
        self.log, self.n = log, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with open(self.log, "a") as f:
            f.write(f"{i}\n")
        r = random.random() if i % 5 == 3 else 0.0
        x = np.random.rand() if i % 7 == 4 else 0.0
        return {"i": np.int64(i), "r": np.array([r, x])}


class Never(Sometimes):
    """The same samples without a draw at all."""

    def __getitem__(self, i):
        with open(self.log, "a") as f:
            f.write(f"{i}\n")
        return {"i": np.int64(i), "r": np.array([float(i), 0.0])}


def calls(log):
    return [int(v) for v in log.read_text().split()]


def test_a_worker_seeds_a_generator_only_once_a_sample_draws_from_it(ferry, tmp_path):
    # A worker process looks at `random`'s and numpy's states around each sample instead of
    # seeding them (3.5 and 1.5 us a sample), until one draws: that sample is read again, seeded,
    # and the generator is seeded before every sample from then on. The draws are those of
    # threads, which seed every sample; a dataset that never draws is read once a sample.
    from ferry import _ferry

    assert _ferry._seed_watch() == (True, True, True, True)  # the layouts checked out here
    want = None
    for processes in (0, 1, 3):
        log = tmp_path / f"log{processes}"
        got, _ = batches_of(ferry, Sometimes(log), processes=processes, seed=3, shuffle=True)
        rows = np.concatenate([b["r"] for b in got])
        if want is None:
            want = rows
            assert sorted(calls(log)) == list(range(40))
            assert np.count_nonzero(rows[:, 0]) == 8 and np.count_nonzero(rows[:, 1]) == 6
        np.testing.assert_array_equal(rows, want, err_msg=f"processes={processes}")
        if processes:
            # each process reads again its first sample that draws from each generator: at most
            # two samples a process, each once more
            read = calls(log)
            again = sorted(set(i for i in read if read.count(i) > 1))
            assert sorted(set(read)) == list(range(40))
            assert len(read) - 40 == len([i for i in read if read.count(i) > 1]) - len(again)
            assert 1 <= len(again) <= 2 * processes, read
            assert all(i % 5 == 3 or i % 7 == 4 for i in again), again
    log = tmp_path / "never"
    got, _ = batches_of(ferry, Never(log), processes=2, seed=3, shuffle=True)
    assert sorted(calls(log)) == list(range(40))
    assert sorted(int(i) for b in got for i in b["i"]) == list(range(40))
    # and a second epoch of the same loader draws as threads do again
    log = tmp_path / "two"
    loader = ferry.Loader(Sometimes(log), batch_size=8, device="cpu", seed=3, shuffle=True,
                          processes=2)
    for epoch in (0, 1):
        rows = np.concatenate([b["r"].numpy() for b in loader.epoch(epoch)])
        threads, _ = batches_of(ferry, Sometimes(tmp_path / "t"), epoch=epoch, processes=0,
                                seed=3, shuffle=True)
        np.testing.assert_array_equal(rows, np.concatenate([b["r"] for b in threads]))
    del loader


class Draws:
    """Sample i: draws of numpy's global generator of several kinds, every sample (a Gaussian of
    a pair, whose second stays cached, among them)."""

    fields = [("d", "f64", (6,))]

    def __len__(self):
        return 48

    def __getitem__(self, i):
        r = np.random
        return {"d": np.array([r.normal(), r.rand(), r.randint(0, 1 << 30), r.binomial(10, 0.3),
                               r.standard_normal() if i % 3 else r.poisson(4.0),
                               r.random_sample()])}


def test_numpy_seeded_in_place_draws_as_threads(ferry):
    # A worker process writes numpy's legacy generator's state in place (its words, position and
    # cached Gaussian, as set_state writes them), once the layout checked out: the draws are
    # those of threads.
    want, _ = batches_of(ferry, Draws(), processes=0, seed=5, shuffle=True)
    for processes in (1, 2):
        got, _ = batches_of(ferry, Draws(), processes=processes, seed=5, shuffle=True)
        np.testing.assert_array_equal(np.concatenate([b["d"] for b in got]),
                                      np.concatenate([b["d"] for b in want]))


MASK64 = (1 << 64) - 1


def mix64(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def sample_seed(seed, epoch, index):
    """lib/pipeline/sampler.hpp's: a sample's seed from (seed, epoch, index)."""
    return mix64(mix64(mix64(seed) ^ ((epoch + 0x9E3779B97F4A7C15) & MASK64)) ^
                 ((index * 0xD6E8FEB86659FD93) & MASK64))


def state_of(seed, generator):
    """What docs/PYTHON.md says `random` (generator 1) or numpy's generator (2) holds before
    sample `seed`'s __getitem__: 624 words of splitmix64 from the generator's own seed, the
    position at 0."""
    start = mix64((seed + generator * 0x9E3779B97F4A7C15) & MASK64)
    words = []
    for i in range(312):
        z = mix64((start + (i + 1) * 0x9E3779B97F4A7C15) & MASK64)
        words += [z & 0xFFFFFFFF, z >> 32]
    return np.array(words, dtype=np.uint32), 0


class StateAtStart:
    """Sample i: the position, words and cached Gaussian (1: one) of `random`'s or numpy's
    generator as __getitem__ finds them, then a Gaussian drawn (so that a worker process seeds
    it before every sample, and the second of the pair stays cached for the next sample)."""

    fields = [("pos", "i64", ()), ("words", "u32", (624,)), ("gauss", "i64", ())]

    def __init__(self, generator):
        self.generator = generator

    def __len__(self):
        return 20

    def __getitem__(self, i):
        if self.generator == "numpy":
            _, words, pos, has_gauss, _ = np.random.get_state()
            np.random.standard_normal()
            return {"pos": pos, "words": words.copy(), "gauss": has_gauss}
        _, internal, gauss_next = random.getstate()
        random.gauss(0.0, 1.0)
        return {"pos": internal[-1], "words": np.array(internal[:-1], np.uint32),
                "gauss": int(gauss_next is not None)}


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.parametrize("generator", ["random", "numpy"])
def test_a_generator_gets_the_state_said_for_each_sample(ferry, processes, generator):
    # The words are drawn from the sample's seed, not by seed() (a chain of 624 dependent
    # multiplications, its first draw mixing all 624 words again: 1.5 us a sample for numpy's,
    # 3.5 for random's, against 0.2-0.3).
    got, _ = batches_of(ferry, StateAtStart(generator), epoch=3, seed=11, processes=processes)
    pos = np.concatenate([b["pos"] for b in got])
    words = np.concatenate([b["words"] for b in got])
    gauss = np.concatenate([b["gauss"] for b in got])
    for i in range(20):
        want_words, want_pos = state_of(sample_seed(11, 3, i), 1 if generator == "random" else 2)
        np.testing.assert_array_equal(words[i], want_words, err_msg=f"sample {i}")
        assert pos[i] == want_pos and gauss[i] == 0, i


def trainer_output(tmp_path, text):
    """The standard output of script `text` (dedented), run to its end with exit status 0."""
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(text))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_a_program_that_replaced_random_seed_still_gets_its_samples_seeded(tmp_path):
    # The state is written into the generator random.random is a method of (here the module's
    # own, random._inst), whatever random.seed is; before, ferry called random.seed, and a
    # program's own random.seed left every sample's draws unseeded (threads and processes
    # disagreed).
    out = trainer_output(tmp_path, """
        import random
        import numpy as np
        random.seed = lambda *args, **kwargs: None  # a program's own
        import ferry

        class Draws:
            fields = [("x", "f64", ())]

            def __len__(self):
                return 16

            def __getitem__(self, i):
                return {"x": random.random()}

        if __name__ == "__main__":
            runs = [np.concatenate([b["x"].numpy() for b in ferry.Loader(
                Draws(), batch_size=8, device="cpu", processes=p, seed=3).epoch(1)])
                for p in (0, 2)]
            print(np.array_equal(*runs), len(set(runs[0].tolist())))
    """)
    assert out.split() == ["True", "16"], out


def test_a_program_whose_random_functions_are_another_generators_gets_that_one_seeded(tmp_path):
    # ferry seeds the generator random.random is a method of: here a subclass of random.Random
    # that keeps drawn bits of its own (which its setstate resets, and a write in place would
    # not), the module's functions rebound to it. Each sample's draws are setstate's, the same
    # on threads and in processes (before, random._inst was seeded and written in place).
    out = trainer_output(tmp_path, """
        import random
        import numpy as np
        import ferry

        class Buffered(random.Random):
            def seed(self, *args, **kwargs):
                self.bits = []
                super().seed(*args, **kwargs)

            def setstate(self, state):
                self.bits = []
                super().setstate(state)

            def random(self):
                if not self.bits:
                    draw = super().random
                    self.bits = [draw() for _ in range(4)]
                return self.bits.pop()

        mine = Buffered(1)
        for name in ("random", "seed", "setstate", "getstate", "gauss", "getrandbits"):
            setattr(random, name, getattr(mine, name))

        class Draws:
            fields = [("x", "f64", ())]

            def __len__(self):
                return 12

            def __getitem__(self, i):
                return {"x": random.random()}

        if __name__ == "__main__":
            runs = [np.concatenate([b["x"].numpy() for b in ferry.Loader(
                Draws(), batch_size=4, device="cpu", processes=p, seed=3).epoch(1)])
                for p in (0, 2)]
            print(np.array_equal(*runs), len(set(runs[0].tolist())))
    """)
    assert out.split() == ["True", "12"], out


class HoldsNumpysLock:
    """Sample 0 takes numpy's global generator's lock and keeps it (a bug in a dataset)."""

    fields = [("x", "i64", ())]

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 0:
            np.random.mtrand._rand._bit_generator.lock.acquire()
        return {"x": np.int64(i)}


def test_a_sample_that_left_numpys_lock_held_does_not_stop_the_seeding():
    # numpy's state is written as set_state writes it, without the lock that np.random.seed
    # waits for: before, the second sample's seeding on threads waited for ever.
    import ferry

    lock = np.random.mtrand._rand._bit_generator.lock
    got = []
    try:
        def run():
            loader = ferry.Loader(HoldsNumpysLock(), batch_size=4, device="cpu", processes=0)
            got.extend(int(x) for b in loader.epoch(0) for x in b["x"].numpy())

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "the epoch hung"
    finally:
        if lock.locked():
            lock.release()
    assert sorted(got) == list(range(16))


class LeavesAGaussian:
    """Even samples leave a cached second Gaussian in `generator`'s state (set_state, no draw);
    odd samples draw a Gaussian from it."""

    fields = [("x", "f64", ())]

    def __init__(self, generator):
        self.generator = generator

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if self.generator == "numpy":
            if i % 2 == 0:
                st = np.random.get_state()
                np.random.set_state((st[0], st[1], st[2], 1, 1000.0 + i))
                return {"x": np.float64(0.0)}
            return {"x": np.float64(np.random.normal())}
        if i % 2 == 0:
            st = random.getstate()
            random.setstate((st[0], st[1], 1000.0 + i))
            return {"x": np.float64(0.0)}
        return {"x": np.float64(random.gauss(0, 1))}


@pytest.mark.parametrize("generator", ["numpy", "random"])
def test_a_cached_gaussian_left_by_a_sample_is_seen(ferry, generator):
    # A draw of a cached second Gaussian moves no word of the generator's state, nor does a
    # set_state that leaves one: the watch looks at numpy's has_gauss and random's gauss_next
    # too. Before, the odd samples drew the 1000.0 left by the one before, unseeded.
    want, _ = batches_of(ferry, LeavesAGaussian(generator), processes=0)
    got, _ = batches_of(ferry, LeavesAGaussian(generator), processes=1)
    np.testing.assert_array_equal(got[0]["x"], want[0]["x"])
    assert all(abs(x) < 100 for x in want[0]["x"])


class Normals:
    """Sample i: a Gaussian from `random` and one from numpy's global generator."""

    fields = [("g", "f64", (2,))]

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return {"g": np.array([random.gauss(0, 1), np.random.normal()])}


def draw_gaussians(worker_id):
    # a worker_init_fn that leaves a second Gaussian cached in each generator (random's
    # gauss_next, numpy's has_gauss): drawn later without moving the generators' words
    random.gauss(0, 1)
    np.random.normal()


def test_a_gaussian_cached_before_the_first_sample_is_not_drawn_unseeded(ferry):
    threads, _ = batches_of(ferry, Normals(), processes=0, workers=1, seed=4)
    for processes in (1, 2):
        got, _ = batches_of(ferry, Normals(), processes=processes, seed=4,
                            worker_init_fn=draw_gaussians)
        np.testing.assert_array_equal(np.concatenate([b["g"] for b in got]),
                                      np.concatenate([b["g"] for b in threads]))


class SlowDraws:
    """Sample i draws from numpy's generator after 0.4 s (a read twice would take 0.8)."""

    fields = [("x", "f64", ())]

    def __len__(self):
        return 3

    def __getitem__(self, i):
        time.sleep(0.4)
        return {"x": np.float64(np.random.rand() if i > 0 else 0.0)}


def test_with_a_timeout_no_sample_is_read_twice(ferry):
    # A sample read a second time (seeded) could overrun `timeout` and cost its process: with a
    # timeout set, every generator is seeded before every sample instead.
    threads, _ = batches_of(ferry, SlowDraws(), processes=0, workers=1, seed=2, batch_size=1)
    got, _ = batches_of(ferry, SlowDraws(), processes=1, seed=2, batch_size=1, timeout=0.7)
    assert [float(b["x"][0]) for b in got] == [float(b["x"][0]) for b in threads]


class DrawAndPutBack:
    """Draws from `random` and numpy's generator and puts their states back: the watch sees no
    change (the documented case for seed_python="always")."""

    fields = [("x", "f64", (2,))]

    def __len__(self):
        return 10

    def __getitem__(self, i):
        r, n = random.getstate(), np.random.get_state()
        x = np.array([random.random(), np.random.rand()])
        random.setstate(r)
        np.random.set_state(n)
        return {"x": x}


def test_seed_python_always_seeds_every_generator_before_every_sample(ferry):
    threads, _ = batches_of(ferry, DrawAndPutBack(), processes=0, workers=1, seed=6)
    want = np.concatenate([b["x"] for b in threads])
    assert len(set(want[:, 0])) == 10  # each sample its own draw
    got, _ = batches_of(ferry, DrawAndPutBack(), processes=2, seed=6, seed_python="always")
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), want)
    with pytest.raises(ferry.ConfigError, match='seed_python must be True, False or "always"'):
        ferry.Loader(DrawAndPutBack(), processes=0, seed_python="sometimes")


class DrawsWhenConverted:
    """A value that draws from `random` and numpy's generator when it is made an array (a lazy
    transform's __array__), as ferry converts it after __getitem__ returns."""

    def __array__(self, dtype=None, copy=None):
        return np.array([random.random(), np.random.rand()], dtype=dtype)


class LazyDraws:
    fields = [("x", "f64", (2,))]

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return {"x": DrawsWhenConverted()}


def test_draws_made_while_a_sample_is_converted_are_its_own(ferry):
    threads, _ = batches_of(ferry, LazyDraws(), processes=0, workers=1, seed=8)
    want = np.concatenate([b["x"] for b in threads])
    assert len(set(want[:, 0])) == 12
    for processes in (1, 2):
        got, _ = batches_of(ferry, LazyDraws(), processes=processes, seed=8)
        np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), want)
    # numpy's booleans are booleans here too
    got, _ = batches_of(ferry, LazyDraws(), processes=1, seed=8, seed_python=np.True_)
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), want)


def test_worker_info_and_worker_init_fn(ferry):
    assert ferry.worker_info() is None
    got, _ = batches_of(ferry, WhoReads(), processes=2, seed=5, worker_init_fn=initialize)
    rows = {int(i): (int(p), tuple(int(v) for v in info), int(init))
            for b in got for i, p, info, init in zip(b["i"], b["pid"], b["info"], b["init"])}
    assert sorted(rows) == list(range(40))
    pids = {p for p, _, _ in rows.values()}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    for pid, (worker, count, seed), init in rows.values():
        assert count == 2 and worker in (0, 1) and init == 100 + worker
    seeds = {info[0]: info[2] for _, info, _ in rows.values()}
    other, _ = batches_of(ferry, WhoReads(), processes=2, seed=6)
    other_seeds = {int(info[0]): int(info[2]) for b in other for info in b["info"]}
    assert all(seeds[w] != other_seeds.get(w) for w in seeds if w in other_seeds)
    # on threads, no worker process: None, and no init
    got, _ = batches_of(ferry, WhoReads(), processes=0)
    assert all(int(v) == -1 for b in got for v in b["info"].ravel())


def test_resume_mid_epoch_under_processes(ferry):
    whole, loader = batches_of(ferry, Augmented(40), shuffle=True, seed=2, processes=2)
    loader = ferry.Loader(Augmented(40), batch_size=8, shuffle=True, seed=2, device="cpu",
                          processes=2)
    ep = loader.epoch(0)
    next(ep)
    next(ep)
    state = loader.state_dict()
    del ep
    again = ferry.Loader(Augmented(40), batch_size=8, shuffle=True, seed=2, device="cpu",
                         processes=1)
    again.load_state_dict(state)
    rest = [{k: b[k].numpy().copy() for k in b.keys()} for b in again]
    assert len(rest) == 3
    for a, b in zip(whole[2:], rest):
        assert np.array_equal(a["i"], b["i"]) and np.array_equal(a["draws"], b["draws"])


def test_a_mixture_of_python_and_ferry_datasets(ferry):
    own = ferry.TensorDataset({"x": np.stack([expected_x(i).astype(np.uint8) for i in range(10)]),
                               "y": np.arange(100, 110, dtype=np.int64)})
    mix = ferry.Mixture([(Indexed(10), 1.0), (own, 1.0)])
    threads, _ = batches_of(ferry, mix, shuffle=True, seed=4, processes=0)
    procs, loader = batches_of(ferry, mix, shuffle=True, seed=4, processes=2)
    assert "worker process" in loader.stats().summary()
    ys = sorted(int(y) for b in procs for y in b["y"])
    assert ys == list(range(10)) + list(range(100, 110))
    assert all(np.array_equal(a["x"], b["x"]) and np.array_equal(a["y"], b["y"])
               for a, b in zip(threads, procs))


# ---- failures -----------------------------------------------------------------------------------


def test_an_exception_keeps_type_message_traceback_text_and_sample(ferry):
    with pytest.raises(KeyError) as info:
        batches_of(ferry, Failing(20), processes=2)
    e = info.value
    assert "label of 9 is missing" in str(e) and e.ferry_sample == 9
    notes = "\n".join(e.__notes__)
    assert "in failing_deep" in notes and "in __getitem__" in notes and "sample 9" in notes


# processes=1: one thread reads each whole batch through one process, so samples wait in its
# queue behind the one that kills it; they go to the fresh process, not lost.
UNDER_ASAN = os.environ.get("FERRY_SANITIZER") == "address"


@pytest.mark.parametrize("how,processes", [("exit", 1), ("exit", 2), ("kill", 1), ("kill", 2)])
def test_a_dying_process_costs_its_sample_and_is_replaced(ferry, how, processes):
    with pytest.raises(ferry.DataError) as info:
        batches_of(ferry, Dying(40, 13, how), processes=processes)
    text = str(info.value)
    assert "sample 13" in text
    assert ("exited with code 3" if how == "exit" else "killed by signal 9 (SIGKILL)") in text
    # skipped: every other sample comes, and a fresh process went on
    got, loader = batches_of(ferry, Dying(40, 13, how), processes=processes, on_error="skip",
                             batch_size=16)
    ys = sorted(int(y) for b in got for y in b["y"])
    assert ys == [i for i in range(40) if i != 13]
    stats = loader.stats()
    assert stats.skipped == 1 and "sample 13" in stats.skip_reasons[0]
    # and the next epoch too (sample 13 dies again there)
    again = [int(y) for b in loader.epoch(1) for y in b["y"].numpy()]
    assert sorted(again) == ys


@pytest.mark.parametrize("processes", [1, 2])
def test_a_sample_over_the_timeout_is_killed_and_skipped(ferry, processes):
    start = time.monotonic()
    got, loader = batches_of(ferry, Slow(24, {5}, 60), processes=processes, timeout=1.0,
                             on_error="skip", batch_size=12)
    # Well under the 60 s sample 5 sleeps (worker processes start in seconds under ASan beside
    # other tests): it was killed at its timeout, not waited for.
    assert time.monotonic() - start < 45
    ys = sorted(int(y) for b in got for y in b["y"])
    assert ys == [i for i in range(24) if i != 5]
    assert "overran timeout=1 s" in loader.stats().skip_reasons[0]


# ---- teardown -----------------------------------------------------------------------------------


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of this process's own: not running
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def test_deleting_a_loader_mid_epoch_leaves_no_process(ferry):
    loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2)
    ep = loader.epoch(0)
    pids = {int(p) for p in next(ep)["pid"].numpy()}
    start = time.monotonic()
    del ep, loader
    assert time.monotonic() - start < 5
    assert wait_gone(pids) == []


def test_teardown_does_not_wait_for_a_slow_getitem(ferry):
    loader = ferry.Loader(Slow(40, set(range(8, 40)), 30), batch_size=4, device="cpu",
                          processes=2)
    ep = loader.epoch(0)
    next(ep)
    time.sleep(0.5)  # the workers are inside 30-second reads now
    start = time.monotonic()
    del ep, loader
    assert time.monotonic() - start < 5


def trainer_with_workers(tmp_path, start_method="forkserver"):
    """A training process whose loader has 2 worker processes and has read a batch, then
    sleeps: (the process, the pids of the workers that read the batch)."""
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import ferry
        from test_pyworkers import WhoReads
        if __name__ == "__main__":
            loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2,
                                  start_method={start_method!r})
            ep = loader.epoch(0)
            print(" ".join(str(int(p)) for p in next(ep)["pid"].numpy()), flush=True)
            time.sleep(60)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    return proc, {int(p) for p in proc.stdout.readline().split()}


def test_a_killed_trainer_leaves_no_process(tmp_path):
    proc, pids = trainer_with_workers(tmp_path)
    try:
        assert pids and os.getpid() not in pids
        proc.kill()
        proc.wait(10)
        assert wait_gone(pids) == []
    finally:
        proc.kill()


class Large(Indexed):
    """Sample i: "x" u8 [8 MiB] of i, and "y"."""

    def __getitem__(self, i):
        return {"x": np.full(8 << 20, i % 251, np.uint8), "y": np.int64(i)}


def test_large_samples_leave_the_budget_room_for_the_loops_batch(ferry):
    # The processes' scratch counted 4 samples in flight each (a window's least) in the budget:
    # with samples of some hundred MB, one staging slot was left, and a plain `for b in loader`
    # (b still holding the last batch during next()) raised "all 1 staging slots are held".
    # Samples over the window's 4 MiB count 2 in flight: here 76 MiB hold the processes' 32
    # (64 before), the reading threads' 16, and 3 slots of a batch.
    loader = ferry.Loader(Large(6), batch_size=1, device="cpu", processes=2,
                          memory_budget=76 << 20)
    seen = [int(b["y"].numpy()[0]) for b in loader.epoch(0)]
    assert seen == list(range(6))
    assert loader.stats().prefetch >= 2


class Converts(Indexed):
    """Sample 0: k i64, d f64, f f32; sample 3 gives `bad` (a field name and a value)."""

    def __init__(self, bad):
        super().__init__(8)
        self.bad = bad

    def __getitem__(self, i):
        out = {"k": np.int64(i), "d": np.float64(i), "f": np.float32(i)}
        if i == 3:
            name, value = self.bad
            out[name] = value
        return out


@pytest.mark.parametrize("bad", [("k", np.uint64(2**63 + 5)), ("k", np.uint64(2**64 - 1)),
                                 ("d", np.int64(2**53 + 1)), ("f", np.complex64(1 + 2j))])
def test_values_that_a_conversion_would_change_are_data_errors(ferry, capfd, bad):
    # A u64 over 2^63 into i64 came back the same bits (the check compared after casting back);
    # numpy calls int64 into f64 safe (2^53 + 1 is not); a complex value's imaginary part went
    # with numpy's ComplexWarning on the terminal.
    loader = ferry.Loader(Converts(bad), batch_size=2, device="cpu", processes=2)
    with pytest.raises(ferry.DataError, match=f'field "{bad[0]}" of sample 3: .* without changing'):
        list(loader)
    assert "Warning" not in capfd.readouterr().err


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("its str() raises")


class RaisesUnprintable(Indexed):
    def __getitem__(self, i):
        if i == 5:
            raise StrRaises("x")
        return super().__getitem__(i)


def test_an_exception_whose_str_raises_arrives_as_itself(ferry, capfd):
    # The worker's failure report called str() on it unguarded: the process died ("exited with
    # code 1") and printed a traceback, for every such sample.
    loader = ferry.Loader(RaisesUnprintable(16), batch_size=4, device="cpu", processes=2)
    with pytest.raises(StrRaises) as raised:
        list(loader)
    assert raised.value.ferry_sample == 5
    assert "Traceback" not in capfd.readouterr().err


class Waits:
    """Sample i: "waits" i64, the times the process that read it has waited so far (voluntary
    context switches); n samples."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("voluntary_ctxt_switches"))
        return {"waits": np.int64(line.split()[1]), "pid": np.int64(os.getpid())}


def test_a_batch_of_quick_samples_goes_to_a_process_in_one_share(ferry):
    # A process reads a share of a batch, then waits for the next share to be sent: shares of
    # 2 samples (a quarter of a thread's half of a batch of 16) had each process wait 8 times a
    # batch. The pool asks for shares of about 4 ms of its samples' time (at least the loader's
    # own split): these take some us each, and a process waits about once a batch.
    batches = 60
    loader = ferry.Loader(Waits(16 * batches), batch_size=16, device="cpu", processes=2,
                          workers=2, autotune=False)
    for epoch in range(2):
        waits = {}
        for b in loader.epoch(epoch):
            for pid, n in zip(b["pid"].numpy().tolist(), b["waits"].numpy().tolist()):
                waits.setdefault(pid, []).append(n)
    # epoch 1: the shares' times known since epoch 0
    total = sum(max(w) - min(w) for w in waits.values())
    assert total <= 3 * batches, (total, batches)


class Tables:
    """Sample i: "shared" i64, the descriptors of the process's other threads' tables (0 where
    each other thread has a table of its own, holding at most one), and "children" its child
    processes."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import glob

        shared = 0
        for task in glob.glob("/proc/self/task/*"):
            if int(os.path.basename(task)) != threading.get_native_id():
                fds = os.listdir(f"{task}/fd")
                shared += len(fds) if len(fds) > 1 else 0
        children = 0
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(stat) as f:
                    children += int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
            except (OSError, IndexError):
                pass
        return {"shared": np.int64(shared), "children": np.int64(children)}


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_worker_shares_its_descriptor_table_with_no_thread_and_has_no_child(ferry,
                                                                              start_method):
    # Its watch of the training process is a thread with a descriptor table of its own (the
    # pidfd only): a table shared with a second thread, even asleep, made each file syscall of a
    # __getitem__ take the kernel's shared-table paths (a PNG opened with PIL took 1 us more of
    # its 20). Not a child process: a __getitem__ reaping children (os.waitpid(-1)) waited for it
    # for ever, and a trainer that is PID 1 was left its zombie.
    loader = ferry.Loader(Tables(), batch_size=4, device="cpu", processes=2,
                          start_method=start_method)
    got = [b for b in loader.epoch(0)]
    assert [int(n) for b in got for n in b["shared"].numpy()] == [0] * 8
    assert [int(n) for b in got for n in b["children"].numpy()] == [0] * 8


class ClosesDescriptors:
    """Sample i: "i" i64; sample 2's __getitem__ closes every descriptor of its process (its
    socket to the training process too) and returns."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 2:
            os.closerange(3, 65536)
        return {"i": np.int64(i)}


def test_a_process_ended_by_a_sample_costs_no_later_sample(ferry):
    # The process ends after sample 2 (it cannot answer): the samples whose tasks it had not
    # begun are read by a fresh process, not failed (a task is marked begun before __getitem__);
    # before, sample 3 was lost and blamed, 3 runs in 4.
    loader = ferry.Loader(ClosesDescriptors(), batch_size=8, device="cpu", processes=1,
                          on_error="skip")
    for epoch in range(4):
        got = sorted(int(i) for b in loader.epoch(epoch) for i in b["i"].numpy())
        assert set(range(16)) - set(got) <= {2}, (epoch, got)
        assert len(got) == len(set(got))


def test_many_epochs_keep_processes_and_descriptors_flat(ferry):
    loader = ferry.Loader(Indexed(64), batch_size=16, device="cpu", processes=2)
    counts = []
    for epoch in range(30):
        assert sum(b.size for b in loader.epoch(epoch)) == 64
        if epoch in (5, 29):
            counts.append((len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))))
    assert counts[0] == counts[1]


class ReusedBuffers:
    """Sample i: the minor page faults of making and filling a buffer of 8 + i MiB a second time
    in this process (the first time just before)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        import resource

        size = (8 + i) << 20
        a = np.empty(size, np.uint8)
        a.fill(1)
        del a
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        a = np.empty(size, np.uint8)
        a.fill(1)
        del a
        return {"faults": np.int64(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)}


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
def test_a_worker_process_reuses_freed_buffers_rather_than_faulting_them_in_again(ferry):
    # glibc's default thresholds in a fresh process map a block of 8 MiB, unmap it when freed,
    # and then take the next one from the heap's top, grown and faulted in (256-514 faults a
    # sample here); the worker's thresholds keep the freed block for the next.
    if any(k.startswith("MALLOC_") for k in os.environ) or "glibc.malloc." in os.environ.get(
            "GLIBC_TUNABLES", ""):
        pytest.skip("malloc thresholds set by the environment")
    if os.environ.get("FERRY_SANITIZER") == "address":
        pytest.skip("AddressSanitizer's allocator, not glibc's, serves the worker processes")
    out, _ = batches_of(ferry, ReusedBuffers(), batch_size=4, processes=1)
    faults = [int(f) for b in out for f in b["faults"]]
    assert len(faults) == 4 and max(faults) < 64, faults


class Big:
    """Sample i: "img" u8 [2 MiB], every byte i."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return {"img": np.full(2 << 20, i, np.uint8)}


def scratch_mapped():
    """The worker processes' shared memory mapped in this process: bytes by inode."""
    sizes = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "memfd:ferry-scratch" in line:
                parts = line.split()
                start, end = (int(a, 16) for a in parts[0].split("-"))
                sizes[parts[4]] = sizes.get(parts[4], 0) + end - start
    return sizes


def test_the_processes_shared_memory_counts_in_memory_bytes_and_the_budget(ferry):
    # Each process's window is 4 MiB of samples, or 4 samples where those are more; the loader's
    # memory_bytes and memory_budget count it for each process.
    for make, low, high in ((lambda: Indexed(64), 4 << 20, 4 << 20),
                            (Big, 4 * (2 << 20), 4 * ((2 << 20) + 4096))):
        options = dict(batch_size=4, device="cpu", autotune=False)
        threads = ferry.Loader(make(), processes=0, workers=2, **options).stats().memory_bytes
        before = scratch_mapped()  # other loaders' processes, still alive (or going)
        loader = ferry.Loader(make(), processes=2, **options)
        held = loader.stats().memory_bytes - threads
        assert 2 * low <= held <= 2 * high, held
        seen = []
        for b in loader.epoch(0):
            if "img" in b.keys():
                img = b["img"].numpy()
                assert all((img[k] == i).all() for k, i in enumerate(b.indices))
            seen += list(b.indices)
        assert sorted(seen) == list(range(len(make())))
        # what this loader's processes' regions grew to (mapped here too) stays within what was
        # counted
        grown = sum(n for inode, n in scratch_mapped().items() if inode not in before)
        assert 0 < grown <= held, (grown, held)
        with pytest.raises(ferry.ConfigError, match=f"{held} held by the dataset's reads"):
            ferry.Loader(make(), processes=2, memory_budget=threads + held - 1, **options)
        ferry.Loader(make(), processes=2, memory_budget=threads + held, **options)
        del loader


def staging_mappers():
    """The loader's staging slots that worker processes write into: the inodes of this process's
    ferry-staging memfds, and the other processes that map each."""
    ours = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "memfd:ferry-staging" in line:
                ours.add(line.split()[4])
    mappers = {inode: set() for inode in ours}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    if "memfd:ferry-staging" in line and line.split()[4] in ours:
                        mappers[line.split()[4]].add(int(pid))
        except OSError:
            continue
    return mappers


def test_worker_processes_write_samples_straight_into_the_staging_slots(ferry):
    # 2 MiB samples: through the processes' own regions each would have grown to hold several;
    # written into the slots, the regions stay at their first 1 MiB (the tasks' state words).
    before, slots_before = scratch_mapped(), staging_mappers()
    loader = ferry.Loader(Big(), batch_size=4, device="cpu", autotune=False, processes=2)
    got = {}
    for b in loader.epoch(0):
        for k, i in enumerate(b.indices):
            got[int(i)] = b["img"].numpy()[k]
    assert sorted(got) == list(range(12))
    assert all((img == i).all() for i, img in got.items())
    regions = [n for inode, n in scratch_mapped().items() if inode not in before]
    assert regions == [1 << 20, 1 << 20], regions
    # the batches' slots are mapped by the worker processes that wrote into them
    writers = set().union(*(p for k, p in staging_mappers().items() if k not in slots_before))
    assert 1 <= len(writers) <= 2, writers
    del loader
    assert wait_gone(writers) == []  # they were this loader's worker processes


def staging_files():
    """{inode: bytes of memory held} of this process's staging slots (ferry-staging memfds)."""
    files = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "memfd:ferry-staging" in os.readlink(f"/proc/self/fd/{fd}"):
                st = os.stat(f"/proc/self/fd/{fd}")
                files[st.st_ino] = st.st_blocks * 512
        except OSError:
            continue  # closed meanwhile
    return files


def staging_allocated(others=frozenset()):
    """Bytes of memory the staging slots hold now, but for the memfds `others` (inodes: those
    of loaders of earlier tests that a reference cycle keeps until the collector runs)."""
    return sum(b for ino, b in staging_files().items() if ino not in others)


def others_now():
    """The staging memfds already there (earlier tests' loaders, collected first if garbage)."""
    gc.collect()
    return frozenset(staging_files())


class Slowish:
    """Sample i: "x" u8 [512 KiB], every byte i % 251 + 1, after 20 ms (asleep: the processes
    are slower than the loop even on a busy machine)."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        time.sleep(0.02)
        return {"x": np.full(512 << 10, i % 251 + 1, np.uint8)}


def test_the_staging_slots_give_their_memory_back_between_epochs(ferry):
    # Five slots (prefetch 4) of 4 MiB. Within an epoch a slot the loop lets go keeps its pages
    # for the batch the processes write into it next; the slots of the epoch's last batches are
    # not written again in the epoch, and a process gives their pages back once the loop lets
    # them go. Every slot is said reused before a process writes into it again (a page given
    # back after that would read as zeros, and the values are checked).
    others = others_now()
    slot = 8 * (512 << 10)
    loader = ferry.Loader(Slowish(), batch_size=8, device="cpu", autotune=False, processes=2,
                          workers=2, prefetch=4, shuffle=True)
    held = []
    between = []
    for e in range(3):
        seen = set()
        for n, b in enumerate(loader.epoch(e)):
            x = b["x"].numpy()
            for k, i in enumerate(b.indices):
                assert (x[k] == int(i) % 251 + 1).all(), (e, n, int(i))
                seen.add(int(i))
            b = x = None  # noqa: PLW2901 (the batch goes back)
            if n >= 5:
                held.append(staging_allocated(others))
        assert seen == set(range(96))
        # Between epochs no slot is written: the epoch's last batches' slots are given back,
        # whether or not the loop waited for them, by the idle processes (no task to go with).
        deadline = time.monotonic() + 10
        while staging_allocated(others) > slot and time.monotonic() < deadline:
            time.sleep(0.01)
        between.append(staging_allocated(others))
    # Within the epoch the slots hold at most their 20 MiB and the pages their sizes round up to
    # (giving each back as the loop let it go cost the processes a fault a page to write it
    # again: BENCHMARKS.md).
    assert max(held) <= 5 * slot + (1 << 20), [h >> 20 for h in held]
    # Every slot idle: at most one (a batch the loop let go while a process was busy) keeps its
    # bytes; before the epoch's tail was given back, all five did (20 MiB).
    assert max(between) <= slot, [h >> 20 for h in between]


def test_an_epoch_started_at_once_keeps_the_slots_pages(ferry):
    # The slots of an epoch's tail are given back only once the processes have had nothing to
    # do for a while: the next epoch, started at once, writes into them again without a fault a
    # page (with 4 batches an epoch, every slot was given back and faulted in again each epoch:
    # 5% of a JPEG epoch's time). Measured as the slots' bytes when the next epoch's first batch
    # comes: all five slots' then; before, one or two.
    others = others_now()
    slot = 8 * (512 << 10)
    loader = ferry.Loader(Slowish(), batch_size=8, device="cpu", autotune=False, processes=2,
                          workers=2, prefetch=4, shuffle=True)
    first = []
    for e in range(3):
        for n, b in enumerate(loader.epoch(e)):
            if n == 0 and e > 0:
                first.append(staging_allocated(others))
            b = None  # noqa: PLW2901
    # (one epoch of two: a machine that stalls the loop for 250 ms between epochs lets a
    # process give them back, as it should)
    assert max(first) >= 4 * slot, [f >> 20 for f in first]


def test_an_epoch_left_early_gives_its_slots_pages_back(ferry):
    # Its batches made but not delivered, and the one the loop held, are idle until the next
    # epoch: their pages go back as an epoch's last batches' do (before, every slot kept its
    # pages until an epoch ran to its end; the processes with answers still to discard were
    # not sent give-backs).
    others = others_now()
    loader = ferry.Loader(Slowish(), batch_size=8, device="cpu", autotune=False, processes=2,
                          workers=2, prefetch=4, shuffle=True)
    for epoch in range(2):
        ep = loader.epoch(epoch)
        for n, b in enumerate(ep):
            if n == 2:
                break
        b = None  # noqa: PLW2901
        del ep
        deadline = time.monotonic() + 10
        while staging_allocated(others) > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert staging_allocated(others) == 0, staging_allocated(others) >> 20
    got = sorted(int(i) for b in loader.epoch(2) for i in b.indices)  # and the next is whole
    assert got == list(range(96))


def wait_for(path, seconds=20):
    """Until the file `path` exists, or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


class Gated:
    """Sample i: "x" u8 [4096], every byte i % 251, "i" its index; until the file `phase` exists,
    every byte 255 instead, and sample 4 first waits for the file `gate`."""

    def __init__(self, n, phase, gate):
        self.n, self.phase, self.gate = n, phase, gate

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not os.path.exists(self.phase):
            if i == 4:
                wait_for(self.gate)
            return {"x": np.full(4096, 255, np.uint8), "i": np.int64(i)}
        time.sleep(0.002)
        return {"x": np.full(4096, i % 251, np.uint8), "i": np.int64(i)}


def inside_sample_4(ferry, cls, n, tmp_path):
    """A loader of cls(n, phase, gate) in 3 processes, unshuffled, batches of 4, and its epoch 0
    after its first batch, a process inside sample 4 by now: (loader, epoch, phase, gate)."""
    phase, gate = tmp_path / "phase", tmp_path / "gate"
    loader = ferry.Loader(cls(n, str(phase), str(gate)), batch_size=4, device="cpu",
                          shuffle=False, autotune=False, processes=3, workers=2, prefetch=4)
    ep = loader.epoch(0)
    next(ep)
    time.sleep(0.3)
    return loader, ep, phase, gate


def test_a_read_given_up_never_writes_into_a_slot_given_to_another_batch(ferry, tmp_path):
    # Epoch 0 is left while a process is inside sample 4 (its tasks 5..7 queued behind it). The
    # two other processes read epoch 1 and fill the ring while the loop holds batch 1; then
    # sample 4 returns, its bytes all 255. Its task was cancelled when its read was given up: it
    # must not write them into the slot it was meant for, which then holds a batch of epoch 1
    # waiting to be taken (unless it is the one the loop holds).
    loader, ep, phase, gate = inside_sample_4(ferry, Gated, 400, tmp_path)
    del ep
    phase.touch()
    seen = []
    opener = threading.Timer(0.3, gate.touch)  # sample 4 of epoch 0 returns then
    opener.start()
    for n, b in enumerate(loader.epoch(1)):
        if n == 1:
            time.sleep(0.8)  # the ring fills, and the gate opens
        x = b["x"].numpy()
        for k, i in enumerate(b.indices):
            assert (x[k] == int(i) % 251).all(), (n, int(i), np.unique(x[k]))
            seen.append(int(i))
    assert sorted(seen) == list(range(400))
    opener.join()


class SlowArray:
    """A value whose conversion to an array (its __array__, Python code) waits for the file
    `gate`, up to 20 s, then gives 4096 bytes of 255."""

    def __init__(self, gate):
        self.gate = gate

    def __array__(self, dtype=None):
        wait_for(self.gate)
        return np.full(4096, 255, np.uint8)


class SlowToConvert(Gated):
    """Sample i: "x" u8 [4096], every byte i % 251, "i" its index; in epoch 0 (until the file
    `phase` exists) sample 4's "x" is a SlowArray."""

    def __getitem__(self, i):
        if i == 4 and not os.path.exists(self.phase):
            return {"x": SlowArray(self.gate), "i": np.int64(i)}
        time.sleep(0.002)
        return {"x": np.full(4096, i % 251, np.uint8), "i": np.int64(i)}


def test_leaving_an_epoch_never_waits_for_a_value_being_converted(ferry, tmp_path):
    # Epoch 0 is left while a process converts sample 4's value (its __array__ waits for a gate,
    # up to 20 s). The task is claimed only once the value is an array, so leaving the epoch
    # cancels it at once (when the claim came before the conversion, `del` waited the 20 s out).
    # Then the gate opens: the late sample must not land in a slot of epoch 1.
    loader, ep, phase, gate = inside_sample_4(ferry, SlowToConvert, 200, tmp_path)
    phase.touch()  # (the process is inside sample 4's __array__)
    start = time.monotonic()
    del ep
    left = time.monotonic() - start
    gate.touch()
    seen = []
    for b in loader.epoch(1):
        x = b["x"].numpy()
        for k, i in enumerate(b.indices):
            assert (x[k] == int(i) % 251).all(), (int(i), np.unique(x[k]))
            seen.append(int(i))
    assert sorted(seen) == list(range(200))
    assert left < 10, f"leaving epoch 0 took {left:.1f} s"


# ---- options ------------------------------------------------------------------------------------


def test_options_that_cannot_work_are_refused(ferry):
    own = ferry.TensorDataset({"x": np.zeros((4, 2), np.float32)})
    with pytest.raises(ferry.ConfigError, match="ferry's own datasets"):
        ferry.Loader(own, processes=2)
    with pytest.raises(ferry.ConfigError, match="start_method"):
        ferry.Loader(Indexed(8), processes=1, start_method="threads")
    with pytest.raises(ferry.ConfigError, match="timeout"):
        ferry.Loader(Indexed(8), processes=1, timeout=-1)
    with pytest.raises(TypeError, match="worker_init_fn"):
        ferry.Loader(Indexed(8), processes=1, worker_init_fn=3)
    # a negative count is a ValueError, as workers'; more than 1024 ferry's own ConfigError
    for bad in (-2, -(2**70)):
        with pytest.raises(ValueError, match="processes is None or an int >= 0") as raised:
            ferry.Loader(Indexed(8), processes=bad)
        assert not isinstance(raised.value, ferry.ConfigError)
    for bad in (1025, 2**70):
        with pytest.raises(ferry.ConfigError, match="processes is 0"):
            ferry.Loader(Indexed(8), processes=bad)


def test_a_dataset_that_cannot_be_pickled(ferry):
    class Local(Indexed):  # defined in a function: pickle cannot find it
        pass

    got, loader = batches_of(ferry, Local(16))
    assert sorted(int(y) for b in got for y in b["y"]) == list(range(16))
    summary = loader.stats().summary()
    assert "runs on ferry's threads" in summary and "cannot be pickled" in summary, summary
    with pytest.raises(ferry.ConfigError, match="cannot be pickled.*Local"):
        ferry.Loader(Local(16), processes=2)


# ---- what a DataLoader user brings along ------------------------------------------------------


@pytest.mark.parametrize("processes", [0, 2])
def test_tuples_are_fields_0_1(ferry, processes):
    got, loader = batches_of(ferry, Pairs(), processes=processes)
    assert [f[0] for f in loader.dataset.fields] == ["0", "1"]
    assert np.array_equal(got[1]["0"], np.stack([np.full((2, 3), i, np.uint8) for i in range(8, 16)]))
    assert list(got[1]["1"]) == list(range(8, 16))


class Nested(Indexed):
    def __getitem__(self, i):
        return {"x": np.zeros(2), "meta": {"id": i}}


def test_nested_dicts_are_refused_naming_the_path(ferry):
    with pytest.raises(ferry.ConfigError, match='field "meta" .*nested'):
        ferry.Loader(Nested(4))


@pytest.mark.parametrize("processes", [0, 2])
@pytest.mark.parametrize("ragged", ["pad", "pack"])
def test_ragged_fields_declared_by_a_python_dataset(ferry, processes, ragged):
    got, _ = batches_of(ferry, Tokens(), processes=processes, ragged=ragged, batch_size=6)
    assert len(got) == 5
    for b in got:
        ys = [int(y) for y in b["y"]]
        wants = [np.arange(y % 5 + 1, dtype=np.int32) + y for y in ys]
        if ragged == "pad":
            for row, want in enumerate(wants):
                assert np.array_equal(b["tokens"][row, :want.size], want)
                assert not b["tokens"][row, want.size:].any()
        else:
            assert np.array_equal(b["tokens"], np.concatenate(wants))


class LyingLength(Tokens):
    def __getitem__(self, i):
        return {"tokens": np.arange(7 if i == 4 else i % 5 + 1, dtype=np.int32), "y": i}


@pytest.mark.parametrize("processes", [0, 2])
def test_a_sample_longer_than_its_length_is_an_error_naming_it(ferry, processes):
    with pytest.raises(Exception, match=r"sample 4"):
        batches_of(ferry, LyingLength(), processes=processes)


def test_torch_dataloader_keywords(ferry):
    torch = pytest.importorskip("torch")
    import ferry.torch as ft

    dl = ft.DataLoader(Pairs(), batch_size=8, shuffle=True, num_workers=2, drop_last=True,
                       timeout=30, worker_init_fn=None, prefetch_factor=2,
                       persistent_workers=True, pin_memory=False,
                       generator=torch.Generator().manual_seed(11), device="cpu")
    assert "2 worker processes" in dl.stats().summary()
    batches = list(dl)
    # lists, as torch's default_collate makes of tuple samples (`batch[0] = batch[0].to(dev)`)
    assert len(batches) == 3 and all(isinstance(b, list) and len(b) == 2 for b in batches)
    images, labels = batches[0]
    assert images.shape == (8, 2, 3) and labels.dtype == torch.int64
    assert torch.equal(images[:, 0, 0].to(torch.int64), labels)
    order = [int(v) for _, y in batches for v in y]
    again = [int(v) for _, y in ft.DataLoader(Pairs(), batch_size=8, shuffle=True,
                                               generator=torch.Generator().manual_seed(11),
                                               device="cpu") for v in y]
    assert order == again and order != sorted(order)
    for keyword in ("collate_fn", "sampler", "batch_sampler"):
        with pytest.raises(TypeError, match=keyword + " has no meaning here: "):
            ft.DataLoader(Pairs(), batch_size=8, **{keyword: lambda *a: None})


def test_torch_dataloader_yields_a_tuple_for_one_field(ferry):
    torch = pytest.importorskip("torch")
    import ferry.torch as ft

    class One(Indexed):
        def __getitem__(self, i):
            return (np.float32(i),)

    (x,) = next(iter(ft.DataLoader(One(8), batch_size=4, device="cpu")))
    assert torch.equal(x, torch.arange(4, dtype=torch.float32))


def run_script(tmp_path, body, signal_after=None):
    """Runs `body` as a script (with the __main__ guard) that imports this file's datasets; it
    prints the worker pids first. Returns (returncode, stdout lines, stderr, pids)."""
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import ferry
        from test_pyworkers import WhoReads, Slow
        if __name__ == "__main__":
    """) + textwrap.indent(textwrap.dedent(body), "    "))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        pids = {int(p) for p in proc.stdout.readline().split()}
        if signal_after is not None:
            time.sleep(signal_after)
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, out.splitlines(), err, pids


def test_ctrl_c_while_waiting_for_a_slow_process(tmp_path):
    rc, out, err, pids = run_script(tmp_path, """
        loader = ferry.Loader(Slow(64, set(range(8, 64)), 30), batch_size=4, device="cpu",
                              processes=2)
        ep = loader.epoch(0)
        pids = set()
        for _ in range(2):
            pids.update(int(p) for p in next(ep)["y"].numpy() * 0)
        import ferry._worker
        print(" ".join(str(p.pid) for p in __import__("multiprocessing").active_children()),
              flush=True)
        try:
            next(ep)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """, signal_after=1.0)
    assert rc == 0 and out[-1:] == ["interrupted"], (rc, out, err)
    assert pids and wait_gone(pids) == []


def test_interpreter_exit_mid_epoch_leaves_no_process(tmp_path):
    rc, out, err, pids = run_script(tmp_path, """
        loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2)
        ep = loader.epoch(0)
        print(" ".join(str(int(p)) for p in next(ep)["pid"].numpy()), flush=True)
        sys.exit(0)  # mid-epoch, the loader and its processes alive
    """)
    assert rc == 0, err
    assert "Traceback" not in err, err
    assert pids and wait_gone(pids) == []


class BigArrays:
    """Holds 4 MiB arrays (C order, Fortran order, a strided view of a larger one, a structured
    dtype), a small one and a memory-mapped file. Sample i: the first values of row i of each
    (after a write to the last value of c's row i, the process's own), a byte of the file, and
    what this process sees of its copy: the bytes of memfd mappings named
    ferry-dataset-array it has resident (Rss) and its proportional share of them (Pss), in KiB."""

    def __init__(self, memmap_path=None):
        rows = 64
        self.c = np.arange(rows * 16384, dtype=np.float32).reshape(rows, 16384)
        self.f = np.asfortranarray(self.c * 2)
        self.strided = np.arange(rows * 2 * 8192, dtype=np.int64).reshape(rows * 2, 8192)[::2]
        self.records = np.zeros(rows * 4096, dtype=[("a", np.int32), ("b", np.float32)])
        self.records["a"] = np.arange(rows * 4096)
        self.small = np.arange(rows, dtype=np.int16)
        self.memmap = None if memmap_path is None else np.memmap(memmap_path, np.uint8, "r")

    def __len__(self):
        return 64

    def __getitem__(self, i):
        self.c[i, -1] += 1  # a write of this process's own, never seen by the trainer
        rss = pss = 0
        if os.path.exists("/proc/self/smaps"):
            inside = False
            with open("/proc/self/smaps") as f:
                for line in f:
                    if not line[0].isupper() or line.split()[0].count("-") == 1:
                        inside = "ferry-dataset-array" in line
                    elif inside and line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif inside and line.startswith("Pss:"):
                        pss += int(line.split()[1])
        mm = -1 if self.memmap is None else int(self.memmap[i * 1000 % len(self.memmap)])
        return {"c": self.c[i, :8].copy(), "f": self.f[i, :8].copy(),
                "strided": self.strided[i, :8].copy(),
                "a": self.records["a"][i * 4096:i * 4096 + 8].copy(), "small": self.small[i],
                "memmap": np.int64(mm),
                "writable": np.int64(self.c.flags.writeable),
                "kib": np.array([rss, pss], np.int64)}


def test_large_numpy_arrays_are_shared_by_the_worker_processes_copy_on_write(ferry, tmp_path):
    # A dataset holding large arrays: each worker process maps one shared copy (copy-on-write),
    # as a forked DataLoader worker shares its parent's pages, rather than unpickling its own.
    raw = tmp_path / "bytes.bin"
    raw.write_bytes(bytes(range(256)) * 4096)
    ds = BigArrays(str(raw))
    threads, _ = batches_of(ferry, BigArrays(str(raw)), processes=0, batch_size=8)
    for processes in (1, 2):
        got, _ = batches_of(ferry, ds, processes=processes, batch_size=8)
        assert len(got) == len(threads) == 8
        for a, b in zip(threads, got):
            for k in ("c", "f", "strided", "a", "small", "memmap", "writable"):
                assert np.array_equal(a[k], b[k]), k
        kib = np.concatenate([b["kib"] for b in got])
        # 4 large arrays (4 MiB each, the strided view copied to its 4 MiB); resident in each
        # process where read, and a share of it in proportion (all of it with one process).
        assert kib[:, 0].max() >= 1024  # some resident: the mappings are there
        if processes == 2:
            assert (kib[:, 1] < kib[:, 0]).any()  # pages shared between the two processes
    # The workers' writes stayed in their processes (the trainer read sample 0 itself, for the
    # fields' shapes).
    last = np.arange(1, 64) * 16384 + 16383
    assert np.array_equal(ds.c[1:, -1], last.astype(np.float32))
    assert all(int(v) == 1 for b in threads for v in b["writable"])


# ---- faults: a worker that dies idle, one that stops answering, a killed trainer, a thread ------


def our_workers():
    """The pids of this process's live worker processes (the loaders of earlier tests gone)."""
    import gc
    import multiprocessing

    gc.collect()
    return {p.pid for p in multiprocessing.active_children() if p.name.startswith("ferry-worker")}


def worker_descriptors():
    """This process's descriptors of worker processes: their sockets and scratch memfds."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        found += target.startswith("socket:") or "memfd:ferry-scratch" in target
    return found


def kill_all(pids):
    """Kills the forkserver's children `pids` and waits until the forkserver has reaped them (all
    their threads gone, and with them their descriptors)."""
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.05)
    assert wait_gone(pids, 0) == []


def test_workers_killed_while_idle_cost_no_sample(ferry):
    # Killed between epochs: the next epoch takes fresh processes and loses nothing.
    loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2)
    first = {int(p) for b in loader.epoch(0) for p in b["pid"].numpy()}
    pids = our_workers()
    assert first <= pids and len(pids) == 2
    kill_all(pids)
    rows = [(int(i), int(p)) for b in loader.epoch(1) for i, p in zip(b["i"].numpy(),
                                                                       b["pid"].numpy())]
    assert sorted(i for i, _ in rows) == list(range(40))
    assert not {p for _, p in rows} & pids


def test_a_worker_killed_while_a_batch_is_held_is_replaced_whole(ferry):
    # The batch let go after the kill: its give-back finds the dead process. The replacement maps
    # the staging slots itself, and the dead one's descriptors and mappings go.
    loader = ferry.Loader(WhoReads(), batch_size=20, device="cpu", processes=2)
    for epoch in range(2):
        assert sum(b.size for b in loader.epoch(epoch)) == 40
    pids = our_workers()  # after a collection: the loaders of earlier tests let go first
    fds, scratch = worker_descriptors(), len(scratch_mapped())
    assert len(pids) == 2
    ep = loader.epoch(2)
    held = next(ep)
    time.sleep(1.0)  # the next batch read: the processes idle
    kill_all(pids)
    del held
    time.sleep(0.2)
    rest = [int(i) for b in ep for i in b["i"].numpy()]
    assert len(rest) == 20
    for epoch in (3, 4):
        got = sorted(int(i) for b in loader.epoch(epoch) for i in b["i"].numpy())
        assert got == list(range(40)), epoch
    assert not our_workers() & pids
    assert len(scratch_mapped()) == scratch
    assert worker_descriptors() == fds


class Muted(Indexed):
    """Sample `victim` closes every descriptor of its process and then hangs."""

    def __init__(self, n, victim):
        super().__init__(n)
        self.victim = victim

    def __getitem__(self, i):
        if i == self.victim:
            os.closerange(3, 4096)
            time.sleep(3600)
        return super().__getitem__(i)


def hanging_init(worker_id):
    time.sleep(3600)


def hangs_once(flag, worker_id):
    if not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(3600)


def run_bounded(tmp_path, body, seconds):
    """`body` run as a script (as run_script) in a session of its own; killed, with whatever it
    started, after `seconds`. Returns (returncode or None when it ran over, stdout, stderr)."""
    script = tmp_path / "bounded.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import ferry
        from test_pyworkers import Muted, Slow, WhoReads, hanging_init, hangs_once
        if __name__ == "__main__":
    """) + textwrap.indent(textwrap.dedent(body), "    "))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=seconds)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


def test_a_worker_that_closes_its_socket_and_hangs_costs_its_sample_only(tmp_path):
    rc, out, err = run_bounded(tmp_path, """
        loader = ferry.Loader(Muted(24, 5), batch_size=4, device="cpu", processes=2,
                              on_error="skip")
        for epoch in range(2):
            got = sorted(int(y) for b in loader.epoch(epoch) for y in b["y"].numpy())
            print(epoch, len(got), 5 in got, loader.stats().skipped, flush=True)
        print(loader.stats().skip_reasons[0], flush=True)
    """, 90)
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert lines[:2] == ["0 23 False 1", "1 23 False 2"], out
    assert "sample 5" in lines[2] and "stopped answering, and was killed" in lines[2], out


def epoch_raises(tmp_path, loader, seconds):
    """Epoch 0 of the loader made by the code `loader`, in a script bounded by `seconds`, until
    it raises: (the lines it printed: "raised <kind> <seconds it took>", then the message)."""
    rc, out, err = run_bounded(tmp_path, f"""
        loader = {loader}
        start = time.monotonic()
        try:
            for b in loader.epoch(0):
                pass
        except ferry.Error as e:
            print("raised", type(e).__name__, round(time.monotonic() - start), flush=True)
            print(e, flush=True)
    """, seconds)
    assert rc == 0, (rc, out, err)
    return out.splitlines()


def test_a_hanging_worker_init_fn_overruns_the_timeout(tmp_path):
    lines = epoch_raises(tmp_path, """ferry.Loader(WhoReads(), batch_size=4, device="cpu",
                              processes=1, timeout=2, worker_init_fn=hanging_init)""", 120)
    # the process's start (its imports: torch, where installed) and then 2 s, not for ever
    assert lines[0].startswith("raised ") and int(lines[0].split()[2]) < 60, lines
    assert "timeout=2 s" in lines[1] and "worker_init_fn" in lines[1], lines


def test_a_hanging_sample_after_a_failed_batch_is_killed_at_its_timeout(tmp_path):
    # One process, samples 1-8 hang: batch 0's seven time out one by one and the epoch raises,
    # while sample 8 (batch 1's, read ahead) still runs in the process; the next read waited for
    # that given-up read's answer for ever.
    lines = epoch_raises(tmp_path, """ferry.Loader(Slow(64, set(range(1, 9)), 3600),
                              batch_size=8, device="cpu", processes=1, timeout=1)""", 150)
    assert lines[0].startswith("raised DataError ") and int(lines[0].split()[2]) < 100, lines
    assert "sample 1 " in lines[1] and "overran timeout=1 s" in lines[1], lines


def test_a_worker_init_fn_that_overran_the_timeout_once_costs_one_sample(tmp_path):
    # Once: its process is started again (before, none was until the next epoch, and every later
    # sample of the epoch was skipped). Twice in an epoch: no process starts again.
    rc, out, err = run_bounded(tmp_path, f"""
        import functools
        loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=1, timeout=2,
                              on_error="skip",
                              worker_init_fn=functools.partial(hangs_once, {str(tmp_path / "flag")!r}))
        for epoch in range(2):
            got = sum(len(b["pid"]) for b in loader.epoch(epoch))
            print(epoch, got, loader.stats().skipped, flush=True)
    """, 150)
    assert rc == 0, (rc, out, err)
    n = len(WhoReads())
    assert out.splitlines() == [f"0 {n - 1} 1", f"1 {n} 1"], out


class HoldsTheGil:
    """Sample i: "x" i64 = i; from sample `first` on, a __getitem__ that stays for minutes in one
    C call holding the GIL (sum over a range), so that no other Python thread of its process
    runs meanwhile."""

    def __init__(self, first):
        self.first = first

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i >= self.first:
            sum(range(10**12))
        return {"x": np.int64(i)}


def descendants(pid):
    """The processes below `pid` (children, their children, ...)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for child, parent in parents.items():
            if parent == p and child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.parametrize("start_method,how,busy",
                         [(m, h, "Slow(64, set(range(8, 64)), 30)")
                          for m in ("forkserver", "spawn") for h in (signal.SIGKILL, signal.SIGTERM)]
                         + [("forkserver", signal.SIGKILL, "HoldsTheGil(8)")])
def test_a_killed_trainer_with_busy_workers_leaves_nothing(tmp_path, how, start_method, busy):
    # The workers inside a 30-second __getitem__ (asleep, or in C code that holds the GIL, which
    # no Python thread of the worker then gets); the forkserver and the resource tracker too.
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import ferry
        from test_pyworkers import HoldsTheGil, Slow
        if __name__ == "__main__":
            loader = ferry.Loader({busy}, batch_size=4, device="cpu",
                                  processes=2, start_method={start_method!r})
            ep = loader.epoch(0)
            next(ep)
            time.sleep(1.0)
            print("busy", flush=True)
            time.sleep(60)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "busy"
        below = descendants(proc.pid)
        assert len(below) >= 2  # the workers (and the forkserver, the resource tracker)
        proc.send_signal(how)
        proc.wait(10)
        assert wait_gone(below, 15) == []
    finally:
        proc.kill()
        for pid in descendants(proc.pid) if proc.poll() is None else ():
            os.kill(pid, signal.SIGKILL)


def test_a_killed_trainer_with_a_stopped_worker_leaves_nothing(tmp_path):
    # A worker stopped by SIGSTOP runs no thread to see the training process go: the forkserver
    # exits with the training process, and its exit kills the worker (it kept the forkserver up,
    # holding the training process's end of its pipe, and stayed stopped for ever).
    proc, workers = trainer_with_workers(tmp_path)
    try:
        below = descendants(proc.pid)
        assert workers and workers <= set(below)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        proc.kill()
        proc.wait(10)
        assert wait_gone(below, 15) == []
    finally:
        proc.kill()
        for pid in descendants(proc.pid) if proc.poll() is None else ():
            os.kill(pid, signal.SIGKILL)


def test_spawn_workers_outlive_the_thread_that_made_the_loader(ferry):
    made = {}

    def make():
        made["loader"] = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2,
                                      start_method="spawn")
        made["pids"] = {int(p) for b in made["loader"].epoch(0) for p in b["pid"].numpy()}

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    time.sleep(0.5)
    assert made["pids"] and all(alive(p) for p in made["pids"])
    rows = [(int(i), int(p)) for b in made["loader"].epoch(1)
            for i, p in zip(b["i"].numpy(), b["pid"].numpy())]
    assert sorted(i for i, _ in rows) == list(range(40))
    assert {p for _, p in rows} <= made["pids"]


# ---- errors of the right kind ---------------------------------------------------------------


class LaterShape(Indexed):
    def __getitem__(self, i):
        return {"x": np.zeros(3 if i != 6 else 4, np.float32), "y": np.int64(i)}


@pytest.mark.parametrize("processes", [0, 2])
def test_a_later_sample_of_another_shape_is_a_data_error_naming_it(ferry, processes):
    with pytest.raises(ferry.DataError, match=r'field "x" of sample 6 has shape \(4,\)') as caught:
        batches_of(ferry, LaterShape(10), processes=processes, batch_size=4)
    # The same text on threads and in processes: named once, not wrapped in its own type's name.
    assert str(caught.value).count("Python dataset:") == 1, str(caught.value)
    assert "DataError:" not in str(caught.value), str(caught.value)
    got, loader = batches_of(ferry, LaterShape(10), processes=processes, batch_size=4,
                             on_error="skip")
    assert sorted(int(y) for b in got for y in b["y"]) == [i for i in range(10) if i != 6]


class BoolPairs(Indexed):
    def __getitem__(self, i):
        return np.full(3, i, np.float32), np.array([True, False])


def test_an_unsupported_dtype_in_a_tuple_names_the_field(ferry):
    with pytest.raises(ferry.ConfigError, match=r'field "1" of sample 0 has dtype bool'):
        ferry.Loader(BoolPairs(4), device="cpu")


def fails_once(flag, worker_id):
    if not os.path.exists(flag):
        open(flag, "w").close()
        raise RuntimeError("worker_init_fn failed once")


def test_a_worker_init_fn_that_failed_once_runs_again_in_a_new_process(ferry, tmp_path):
    # Its epoch raises what it raised; the process is replaced, so the next epoch's runs
    # worker_init_fn again (before, the process stayed and failed every later sample too).
    import functools

    loader = ferry.Loader(Indexed(16), batch_size=4, device="cpu", processes=1,
                          worker_init_fn=functools.partial(fails_once, str(tmp_path / "flag")))
    with pytest.raises(RuntimeError, match="worker_init_fn failed once"):
        for _ in loader.epoch(0):
            pass
    for epoch in (1, 2):
        got = sorted(int(y) for b in loader.epoch(epoch) for y in b["y"].numpy())
        assert got == list(range(16)), (epoch, got)


def test_a_worker_init_fn_that_cannot_be_pickled_is_a_config_error(ferry):
    with pytest.raises(ferry.ConfigError, match="worker_init_fn"):
        batches_of(ferry, Indexed(8), processes=1, worker_init_fn=lambda worker_id: None)


class LateTorch:
    """torch imported by __getitem__ itself (this module does not import it): 3 draws of torch's
    generator a sample."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import torch  # noqa: PLC0415

        return {"i": np.int64(i), "t": torch.rand(3).numpy()}


class LookedForTorch(LateTorch):
    """LateTorch after importlib.util.find_spec("torch") in the same call, as a library that asks
    whether torch is installed before importing it does (transformers' is_torch_available())."""

    def __getitem__(self, i):
        import importlib.util  # noqa: PLC0415

        assert importlib.util.find_spec("torch") is not None
        return super().__getitem__(i)


@pytest.mark.parametrize("kind", ["LateTorch", "LookedForTorch"])
def test_torch_first_imported_by_getitem_is_seeded_for_that_sample(tmp_path, kind):
    pytest.importorskip("torch")
    # each run in a trainer of its own (a fresh forkserver: no process has torch imported yet)
    runs = []
    for processes in (0, 2, 2):
        rc, out, err = run_bounded(tmp_path, f"""
            import numpy as np
            from test_pyworkers import {kind}
            loader = ferry.Loader({kind}(), batch_size=4, device="cpu", seed=5,
                                  processes={processes})
            t = np.concatenate([b["t"].numpy() for b in loader.epoch(0)])
            print(" ".join(repr(float(v)) for v in t.reshape(-1)), flush=True)
        """, 120)
        assert rc == 0, (rc, out, err)
        runs.append(out.split())
    threads, first, second = runs
    assert len(threads) == 48 and first == threads and second == threads, runs


def test_ctrl_c_while_the_worker_processes_start(tmp_path):
    # Ctrl-C at the terminal reaches the whole process group: the trainer, the forkserver and the
    # worker processes, which may still be importing
    for attempt in range(3):
        rc, out, err = run_bounded(tmp_path, """
            import signal, threading
            loader = ferry.Loader(WhoReads(), batch_size=4, device="cpu", processes=2)
            threading.Timer(0.05 * (attempt + 1),
                            lambda: os.killpg(os.getpgid(0), signal.SIGINT)).start()
            try:
                time.sleep(3)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
            print(sum(len(b["i"]) for b in loader.epoch(0)), flush=True)
        """.replace("attempt", str(attempt)), 60)
        assert rc == 0 and out.split() == ["interrupted", "40"], (rc, out, err)
        assert "KeyboardInterrupt" not in err and "Traceback" not in err, err


def test_a_forked_trainer_starts_worker_processes_of_its_own(tmp_path):
    rc, out, err = run_bounded(tmp_path, """
        dataset = WhoReads()
        loader = ferry.Loader(dataset, batch_size=4, device="cpu", processes=2)
        print("parent", sum(len(b["i"]) for b in loader.epoch(0)), flush=True)
        child = os.fork()
        if child == 0:
            try:
                for made in (dataset, WhoReads()):  # made before the fork, and after
                    fresh = ferry.Loader(made, batch_size=4, device="cpu", processes=2)
                    pids = [int(p) for b in fresh.epoch(0) for p in b["pid"].numpy()]
                    print("child", len(pids), os.getpid() not in pids, flush=True)
                    del fresh
            except BaseException as e:
                print("child failed", type(e).__name__, e, flush=True)
            sys.stdout.flush()
            os._exit(0)
        _, status = os.waitpid(child, 0)
        print("waited", status, flush=True)
        print("parent", sum(len(b["i"]) for b in loader.epoch(1)), flush=True)
    """, 120)
    assert rc == 0, (rc, out, err)
    assert out.splitlines() == ["parent 40", "child 40 True", "child 40 True", "waited 0",
                                "parent 40"], (out, err)
