# The loader under hostile use: threads sharing an epoch, interpreter exit, fork, signals,
# teardown, options, states and the Batch mapping. Bodies that could crash or hang run in a child
# interpreter with a time limit, so that a crash or a hang fails one test.
import collections.abc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from conftest import Indexed

PRELUDE = """
import os, sys, time, threading, signal, numpy as np, ferry
class Indexed:
    def __init__(self, n, delay=0.0, slow_from=0):
        self.n, self.delay, self.slow_from = n, delay, slow_from
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.delay and i >= self.slow_from:
            time.sleep(self.delay)
        return {"x": np.full(3, i % 251, dtype=np.uint8), "y": np.int64(i)}
"""


def run_child(code, timeout=60):
    """Runs PRELUDE + code in a fresh interpreter; a hang is a failure, not a stuck suite."""
    try:
        return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                              env=dict(os.environ), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child hung for {timeout} s; stdout: {e.stdout!r}, stderr: {e.stderr!r}")


def assert_clean(r):
    assert r.returncode == 0, f"rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    for noise in ("FATAL", "terminate called", "Segmentation", "TBB Warning"):
        assert noise not in r.stderr, r.stderr


# 1. An epoch shared by threads.

def test_two_threads_calling_next_get_every_batch_once():
    r = run_child("""
        data = ferry.TensorDataset({"y": np.arange(4000, dtype=np.int64)})
        loader = ferry.Loader(data, batch_size=1, device="cpu", shuffle=True, seed=3)
        for epoch in range(3):
            ep = loader.epoch(epoch)
            got = [[], []]
            def take(k):
                for b in ep:
                    got[k].append((b.number, int(b["y"].numpy()[0])))
            ts = [threading.Thread(target=take, args=(k,)) for k in range(2)]
            for t in ts: t.start()
            for t in ts: t.join()
            seen = sorted(got[0] + got[1])
            assert [n for n, _ in seen] == list(range(4000)), "batches lost or repeated"
            assert sorted(y for _, y in seen) == list(range(4000))
            for k in range(2):  # each thread saw its batches in order
                assert [n for n, _ in got[k]] == sorted(n for n, _ in got[k])
        print("ok")
    """)
    assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_close_from_another_thread_wakes_a_waiting_next():
    r = run_child("""
        loader = ferry.Loader(Indexed(64, delay=3, slow_from=8), batch_size=8, workers=2,
                              device="cpu")
        ep = loader.epoch(0)
        first = next(ep)
        outcome = []
        def waiter():
            t0 = time.monotonic()
            try:
                next(ep)
                outcome.append("batch")
            except StopIteration:
                outcome.append("stop %.3f" % (time.monotonic() - t0))
        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        ep.close()
        t.join(20)
        assert not t.is_alive(), "next() still waits after close()"
        assert outcome and outcome[0].startswith("stop"), outcome
        assert list(first["y"].numpy()) == list(range(8))  # a batch taken stays valid
        print("closed in %.3f s" % (time.monotonic() - t0))
        os._exit(0)
    """)
    assert_clean(r)
    assert r.stdout.startswith("closed in")


# 2. Interpreter exit while another thread iterates.

@pytest.mark.parametrize("slow", [False, True])
def test_exit_while_a_daemon_thread_iterates(slow):
    for _ in range(3):
        r = run_child(f"""
            loader = ferry.Loader(Indexed(100000, delay={0.001 if slow else 0}), batch_size=16,
                                  workers=2, device="cpu")
            started = threading.Event()
            def loop():
                for e in range(1000):
                    for b in loader.epoch(e):
                        started.set()
            threading.Thread(target=loop, daemon=True).start()
            started.wait(20)
            time.sleep(0.2)
            print("exiting", flush=True)
        """, timeout=60)
        assert_clean(r)
        assert "exiting" in r.stdout


# 3. Fork.

@pytest.mark.skipif(os.environ.get("FERRY_SANITIZER") == "address",
                    reason="under ASan's preloaded runtime the child (which delivers every "
                           "sample) hangs in the interpreter's exit; not yet understood")
def test_a_forked_child_starts_clean():
    r = run_child("""
        data = Indexed(200)
        loader = ferry.Loader(data, batch_size=16, workers=2, device="cpu")
        ep = loader.epoch(0)
        next(ep)  # the parent's pipeline is running when it forks
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    next(ep)
                    print("child: the parent's epoch ran", flush=True)
                except ferry.ConfigError as e:
                    assert "os.fork()" in str(e), e
                try:
                    loader.epoch(1)
                    print("child: the parent's loader ran", flush=True)
                except ferry.ConfigError as e:
                    assert "os.fork()" in str(e), e
                mine = ferry.Loader(data, batch_size=16, workers=2, device="cpu", shuffle=True)
                got = sorted(int(y) for b in mine.epoch(0) for y in b["y"].numpy())
                assert got == list(range(200)), got
                code = 0
            finally:
                sys.stdout.flush()
                sys.exit(code)  # atexit runs in the child: it must not wait for the parent's
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        rest = [int(y) for b in ep for y in b["y"].numpy()]
        assert rest == list(range(16, 200)), rest
        print("ok")
    """, timeout=60)
    assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_a_forked_child_exits_while_the_parents_thread_reads_python():
    # A worker thread of the parent is inside Python (a dataset read in threads, processes=0)
    # when the main thread forks: the child has no such thread, and its exit must not wait for it.
    r = run_child("""
        inside, go = threading.Event(), threading.Event()
        class Blocking:
            def __len__(self):
                return 8
            def __getitem__(self, i):
                if i == 2:
                    inside.set()
                    go.wait()
                return {"y": np.int64(i)}
        loader = ferry.Loader(Blocking(), batch_size=1, workers=1, processes=0, device="cpu")
        ep = loader.epoch(0)
        assert inside.wait(30)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # atexit runs ferry's exit hook in the child
        _, status = os.waitpid(pid, 0)
        go.set()
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert [int(y) for b in ep for y in b["y"].numpy()] == list(range(8))
        print("ok")
    """, timeout=30)
    assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_multiprocessing_fork_pool_uses_ferry_after_the_parent_did():
    r = run_child("""
        import multiprocessing as mp
        def work(seed):
            l = ferry.Loader(Indexed(64), batch_size=8, device="cpu", shuffle=True, seed=seed)
            return sorted(int(y) for b in l.epoch(0) for y in b["y"].numpy())
        if __name__ == "__main__":
            l = ferry.Loader(Indexed(64), batch_size=8, workers=2, device="cpu")
            assert sum(1 for _ in l.epoch(0)) == 8
            with mp.get_context("fork").Pool(2) as pool:
                results = pool.map(work, range(4))
            assert all(r == list(range(64)) for r in results), results
            print("ok")
    """, timeout=90)
    assert_clean(r)
    assert r.stdout.strip() == "ok"


# 4. Signals while next() waits.

def test_a_users_sigterm_handler_runs_while_next_waits():
    r = run_child("""
        ran = []
        signal.signal(signal.SIGTERM, lambda s, f: ran.append(time.monotonic()))
        loader = ferry.Loader(Indexed(32, delay=0.3, slow_from=8), batch_size=8, workers=1,
                              device="cpu")
        ep = loader.epoch(0)
        next(ep)
        sent = []
        def send():
            time.sleep(0.2)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=send).start()
        b = next(ep)  # the handler returns: the wait goes on, and the batch comes
        assert list(b["y"].numpy()) == list(range(8, 16))
        assert ran, "the handler never ran"
        print("late %.3f" % (ran[0] - sent[0]))
        os._exit(0)
    """, timeout=60)
    assert_clean(r)
    assert r.stdout.startswith("late"), r.stdout
    assert float(r.stdout.split()[1]) < 1.0


def test_a_sigint_handler_that_returns_does_not_cancel_the_epoch():
    r = run_child("""
        flagged = []
        signal.signal(signal.SIGINT, lambda s, f: flagged.append(1))
        loader = ferry.Loader(Indexed(24, delay=0.5, slow_from=8), batch_size=8, workers=1,
                              device="cpu")
        ep = loader.epoch(0)
        got = [list(next(ep)["y"].numpy())]
        threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        for b in ep:
            got.append(list(b["y"].numpy()))
        assert flagged == [1]
        assert got == [list(range(0, 8)), list(range(8, 16)), list(range(16, 24))], got
        print("ok")
    """, timeout=60)
    assert_clean(r)
    assert r.stdout.strip() == "ok"


def test_interrupt_main_without_a_signal_raises_promptly():
    r = run_child("""
        import _thread
        loader = ferry.Loader(Indexed(32, delay=20, slow_from=8), batch_size=8, workers=1,
                              device="cpu")
        ep = loader.epoch(0)
        next(ep)
        threading.Timer(0.2, _thread.interrupt_main).start()
        t0 = time.monotonic()
        try:
            next(ep)
            print("no interrupt")
        except KeyboardInterrupt:
            print("interrupted %.3f" % (time.monotonic() - t0))
        sys.stdout.flush()
        os._exit(0)
    """, timeout=60)
    assert_clean(r)
    assert r.stdout.startswith("interrupted"), r.stdout
    assert float(r.stdout.split()[1]) < 1.5


# 5. Teardown with reads in flight: it waits for the reads already running (one per worker),
# never for the samples not begun.

def test_teardown_waits_only_for_the_reads_in_flight():
    r = run_child("""
        loader = ferry.Loader(Indexed(4096, delay=0.5, slow_from=16), batch_size=16, workers=2,
                              prefetch=4, device="cpu", autotune=False)
        ep = loader.epoch(0)
        next(ep)
        time.sleep(0.2)
        t0 = time.monotonic()
        del ep, loader
        print("%.3f" % (time.monotonic() - t0))
    """, timeout=60)
    assert_clean(r)
    assert float(r.stdout.strip()) < 1.5  # one read of 0.5 s per worker, and some slack


# 8. Options: what the user set is what they see.

def test_prefetch_bounds_and_stats_quote_what_was_set(ferry):
    data = ferry.TensorDataset({"y": np.arange(40, dtype=np.int64)})
    with pytest.raises(ferry.ConfigError, match="prefetch must be at least 1, got 0"):
        ferry.Loader(data, prefetch=0, device="cpu")
    with pytest.raises(ferry.ConfigError, match="at most 1024, got 1025"):
        ferry.Loader(data, prefetch=1025, device="cpu")
    for p in (1, 3, 1024):
        l = ferry.Loader(data, batch_size=4, prefetch=p, device="cpu", autotune=False)
        assert [int(y) for b in l.epoch(0) for y in b["y"].numpy()] == list(range(40))
        assert l.stats().prefetch == p


def test_rank_of_the_wrong_type_is_a_type_error(ferry):
    data = ferry.TensorDataset({"y": np.arange(40, dtype=np.int64)})
    for bad in ("0", 0.0, True):
        with pytest.raises(TypeError, match="rank is an int or None"):
            ferry.Loader(data, rank=bad, world_size=2, device="cpu")
    with pytest.raises(TypeError, match="world_size is an int or None"):
        ferry.Loader(data, rank=0, world_size="2", device="cpu")


# 9. A refused state changes nothing; a loaded one is reported at once.

def test_a_refused_state_changes_nothing(ferry):
    data = ferry.TensorDataset({"y": np.arange(40, dtype=np.int64)})
    l = ferry.Loader(data, batch_size=4, device="cpu", shuffle=True, seed=1)
    assert sum(1 for _ in iter(l)) == 10  # epoch 0
    before = l.state()
    other = ferry.Loader(ferry.TensorDataset({"y": np.arange(41, dtype=np.int64)}), batch_size=4,
                         device="cpu", shuffle=True, seed=1)
    for garbage in ({"state": "nonsense"}, {"nope": 1}, {"state": other.state()}, "text", {"state": 3}):
        with pytest.raises((ferry.ConfigError, TypeError)):
            l.load_state_dict(garbage)
        assert l.state() == before
    nxt = [b.indices.tolist() for b in iter(l)]  # epoch 1, as if nothing had been tried
    assert nxt == [b.indices.tolist() for b in l.epoch(1)]


def test_a_loaded_state_is_reported_at_once(ferry):
    data = ferry.TensorDataset({"y": np.arange(40, dtype=np.int64)})
    l = ferry.Loader(data, batch_size=4, device="cpu", shuffle=True, seed=1)
    ep = l.epoch(2)
    for _ in range(3):
        next(ep)
    saved = l.state_dict()
    ep.close()
    fresh = ferry.Loader(data, batch_size=4, device="cpu", shuffle=True, seed=1)
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved  # a checkpoint right after the restore keeps the place
    rest = [b.indices.tolist() for b in iter(fresh)]
    assert rest == [b.indices.tolist() for b in l.epoch(2, 3)]


# 11. The batch is a Mapping.

def test_batch_is_a_mapping(ferry):
    l = ferry.Loader(Indexed(8), batch_size=4, device="cpu")
    b = next(iter(l.epoch(0)))
    assert isinstance(b, collections.abc.Mapping)
    assert b.get("nope") is None and b.get("nope", 5) == 5
    assert b.get("y").numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(KeyError):
        b["nope"]
    assert "y" in b and "nope" not in b and 3 not in b
    assert sorted(dict(b).keys()) == ["x", "y"]


# Noise: a library prints nothing on the user's terminal.

def test_two_live_loaders_print_nothing():
    r = run_child("""
        a = ferry.Loader(Indexed(256), batch_size=16, workers=2, device="cpu")
        ea = a.epoch(0)
        next(ea)
        b = ferry.Loader(Indexed(256), batch_size=16, workers=2, device="cpu")
        assert sum(1 for _ in b.epoch(0)) == 16
        assert sum(1 for _ in ea) == 15
        c = ferry.Loader(Indexed(256), batch_size=16, workers=4, device="cpu")
        assert sum(1 for _ in c.epoch(0)) == 16
    """)
    assert_clean(r)
    assert r.stderr == ""


# 10. A dataset that refers to its loader: the collector frees the cycle.

def test_a_cycle_through_the_loader_is_collected():
    r = run_child("""
        import gc, weakref
        class Owner(Indexed):
            pass
        refs = []
        for _ in range(3):
            d = Owner(64)
            d.loader = ferry.Loader(d, batch_size=8, device="cpu")
            assert sum(1 for _ in d.loader.epoch(0)) == 8
            refs.append(weakref.ref(d))
            del d
        gc.collect()
        assert [r() for r in refs] == [None, None, None], "the cycles were not collected"
        print("ok")
    """)
    assert_clean(r)
    assert r.stdout.strip() == "ok"
