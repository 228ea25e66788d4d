"""The ceiling of bench/python's pyworkers part: what the dataset allows, with no loader. The same
`__getitem__` (bench/py/pyobj.py) over a shuffled permutation of the indices, in N plain worker
processes that live across epochs, each sample's arrays touched where they were made (one
element of each read, as the loaders' consumers read one element of each batch's fields). No
batching, no collation, no copy to another process: the loaders' overhead is what they fall
short of this.

  ceiling_side.py pyworkers-png|pyworkers-jpeg|pyworkers-numpy --data PATH --workers N
                  [--warmup N (1)] [--epochs N (1)] [--seed S (42)] [--mark] [--import-torch]
                  [--plain-malloc]

The processes' malloc is tuned as ferry's worker processes tune theirs (--plain-malloc: glibc's
defaults), so that the ceiling is the dataset's, not the allocator's.

Each epoch draws one permutation (numpy's generator seeded by seed and epoch) and gives worker w
the positions w, w + N, w + 2N, ... of it (the loaders deal whole batches round-robin; the
work is the same). The processes start (forkserver, as ferry's default) before the first epoch
and import what the dataset needs in the warm-up epochs; an epoch's time is from sending the
epoch to the last worker's answer. One JSON line on stdout with the other sides' keys
(samples_per_s, epoch_s, trainer_cpu_s), "@timed begin/end" on stderr with --mark.
"""

import argparse
import json
import multiprocessing
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

import pyobj  # noqa: E402


def touch(item):
    """Reads one element of each array of a sample (a dict of numpy arrays and scalars)."""
    total = 0.0
    for value in item.values():
        a = np.asarray(value)
        total += float(a.reshape(-1)[0]) if a.size else 0.0
    return total


def serve(conn, workload, data, worker, workers, seed):
    ds = pyobj.make(workload, data)
    while True:
        epoch = conn.recv()
        if epoch is None:
            return
        order = np.random.default_rng([seed, epoch]).permutation(len(ds))
        np.random.seed((seed * 1_000_003 + epoch * 101 + worker) % 2**32)
        mine = order[worker::workers]
        total = 0.0
        for i in mine:
            total += touch(ds[int(i)])
        conn.send((len(mine), total))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=list(pyobj.PYWORKERS))
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mark", action="store_true")
    p.add_argument("--import-torch", action="store_true")
    p.add_argument("--plain-malloc", action="store_true",
                   help="glibc's default malloc thresholds in the processes (not ferry's)")
    args = p.parse_args()
    if args.import_torch:
        import torch  # noqa: F401  (as a training script would)
    if not args.plain_malloc:
        # glibc's malloc as ferry's worker processes set it (python/src/py_reader.cpp,
        # tune_malloc): blocks up to 32 MiB from the heap, 64 MiB kept at its top. A fresh
        # process starts at 128 KiB and then maps, faults in and unmaps each image PIL makes: a
        # JPEG sample's __getitem__ took 5.8 ms here against 2.1 ms in ferry's workers. The
        # forkserver reads these at its exec; its children inherit them.
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
        os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(64 << 20))
    ctx = multiprocessing.get_context("forkserver")
    start = time.perf_counter()
    n = len(pyobj.make(args.workload, args.data))
    conns, procs = [], []
    for w in range(args.workers):
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(theirs, args.workload, args.data, w, args.workers,
                                               args.seed), daemon=True)
        proc.start()
        theirs.close()
        conns.append(ours)
        procs.append(proc)
    out = {"side": "ceiling", "workload": args.workload, "workers": args.workers,
           "malloc": "glibc defaults" if args.plain_malloc else "ferry's worker thresholds",
           "open_s": time.perf_counter() - start}

    def epoch(e):
        for c in conns:
            c.send(e)
        done = [c.recv() for c in conns]
        if sum(k for k, _ in done) != n:
            raise SystemExit(f"ceiling: epoch {e} read {sum(k for k, _ in done)} of {n}")

    for e in range(args.warmup):
        epoch(e)
    if args.mark:
        print("@timed begin", file=sys.stderr, flush=True)
    seconds, cpu = [], []
    for e in range(args.warmup, args.warmup + args.epochs):
        c = time.process_time()
        t = time.perf_counter()
        epoch(e)
        seconds.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    if args.mark:
        print("@timed end", file=sys.stderr, flush=True)
    for c in conns:
        c.send(None)
    for proc in procs:
        proc.join(10)
    m = float(np.median(seconds))
    out.update(samples=n, epoch_s=m, epochs_s=seconds, samples_per_s=n / m,
               trainer_cpu_s=float(np.median(cpu)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
