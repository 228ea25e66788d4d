"""ferry's Python half of bench/python: bench/ferry_side's workloads through the Python module,
the loader iterated from Python. One workload per process, one JSON line of results on stdout
with ferry_side's keys (the driver reads the last line that starts with '{').

  ferry_py_side.py inmem  --data DIR  [--size N]  Fashion-MNIST train (IDX .gz files in DIR) as
                                                  ferry.TensorDataset of numpy arrays: "image"
                                                  u8 [28, 28], "label" i64
  ferry_py_side.py png    --data ROOT             ImageFolder 28 x 28 x 1, geometry "resize",
                                                  Normalize(): "image" f32 [1, 28, 28]
  ferry_py_side.py jpeg   --data ROOT             ImageFolder 224 x 224 x 3, resize 256 then the
                                                  central crop, Normalize(): f32 [3, 224, 224]
  ferry_py_side.py csv    --data FILE             CsvDataset (its parse timed) + the epochs
  ferry_py_side.py tokens --data DIR              TokenDataset of DIR's *.bin (llm.c shards of
                                                  u16, as bench/tokens writes them), windows of
                                                  --seq-len (1024): "input", "target" i64
  ferry_py_side.py pyobj-numpy|pyobj-png|pyobj-jpeg --data PATH
                                                  a dataset written in Python (bench/py/pyobj.py)
  ferry_py_side.py pyworkers-png|pyworkers-jpeg|pyworkers-numpy --data PATH --processes N
                                                  the same in N worker processes

Loader options as ferry_side's: --workers N (2) --batch N (256) --prefetch N (4) --seed S (42);
device cpu, shuffled, autotune off (--autotune: on); a Python dataset on ferry's threads
(--processes 0, the default here) or in N worker processes. "trainer_cpu_s" is this process's
CPU time (all its threads) per timed epoch, median. --plain: the timed loop only takes each
field (`x = batch[name]`), as a training loop does, and reads nothing. --warmup N (1) untimed epochs, then --epochs N (1) timed ones; the consumer
reads one element of every field of every batch (ferry_side reads one byte), and the first 3
batches of the first epoch are summed. --check DUMP: ferry_side's check mode (no timing; the
first 3 batches of an unshuffled epoch summed, their first 64 samples written to DUMP).

The Python loader makes one staging slot more than --prefetch (a for loop still holds the
previous batch while it asks for the next one): "staging_slots" in the JSON says how many.
--mark writes "@timed begin" and "@timed end" lines to stderr around the timed epochs (for the
driver's memory sampling); --import-torch imports torch first, as a training script would;
--no-seed-python leaves random, numpy and torch unseeded per sample (seed_python=False).
"""

import argparse
import glob
import json
import os
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

CHECK_BATCHES = 3
DUMP_SAMPLES = 64
WORKLOADS = ["inmem", "png", "jpeg", "csv", "tokens", "pyobj-numpy", "pyobj-png", "pyobj-jpeg",
             "pyworkers-png", "pyworkers-jpeg", "pyworkers-numpy"]
NUMPY_DTYPE = {"u8": "uint8", "u16": "uint16", "u32": "uint32", "i32": "int32", "i64": "int64",
               "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def peak_rss_mb():
    """This process's own peak RSS in MB: VmHWM of /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def mark(args, what):
    if args.mark:
        print(f"@timed {what}", file=sys.stderr, flush=True)


def dataset(ferry, args, out):
    """The workload's dataset; the CSV parse is timed into out["open_s"] by the caller."""
    w = args.workload
    if w == "inmem":
        import make_data
        x, y = make_data.fashion_mnist(args.data)
        n = args.size or len(x)
        # make_data's arrays are read-only views of the decompressed file: DLPack cannot carry a
        # read-only array, so the images are copied once (ferry_side views the IdxDataset's).
        images = np.resize(x, (n,) + x.shape[1:]) if n != len(x) else np.ascontiguousarray(x)
        if not images.flags.writeable:
            images = images.copy()
        labels = np.resize(y, n) if n != len(y) else y
        return ferry.TensorDataset({"image": images, "label": labels})
    if w == "png":
        return ferry.ImageFolder(args.data, height=28, width=28, channels=1, geometry="resize",
                                 normalize=ferry.Normalize())
    if w == "jpeg":
        return ferry.ImageFolder(args.data, height=224, width=224, channels=3,
                                 geometry="resize_then_center_crop", resize=256,
                                 normalize=ferry.Normalize())
    if w == "csv":
        out["file_bytes"] = os.path.getsize(args.data)
        return ferry.CsvDataset(args.data)
    if w == "tokens":
        files = sorted(glob.glob(os.path.join(args.data, "*.bin")))
        if not files:
            raise SystemExit(f"ferry_py_side: no *.bin token shards in {args.data}")
        return ferry.TokenDataset(files, seq_len=args.seq_len, dtype="i64", raw_dtype="u16")
    import pyobj
    return pyobj.make(w, args.data)


def field_sums(batch, names):
    fields = []
    for name in names:
        a = batch[name].numpy()
        flat = a.reshape(-1)
        # np.cumsum adds in memory order, as ferry_side's loop does.
        total = float(np.cumsum(flat, dtype=np.float64)[-1]) if flat.size else 0.0
        fields.append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "sum": total})
    return fields


def plain_epoch(loader, e, names):
    """Seconds for epoch `e` as a plain training loop takes it: `x = batch[name]`, nothing read."""
    start = time.perf_counter()
    for batch in loader.epoch(e):
        for name in names:
            x = batch[name]  # noqa: F841
    return time.perf_counter() - start


def epoch(loader, e, names, sums=None):
    """Seconds for epoch `e`, from epoch() until it is over and closed; every batch's fields
    touched (one element read), the first batches summed into `sums` if given."""
    sink = 0
    start = time.perf_counter()
    batch = None
    with loader.epoch(e) as ep:
        b = 0
        for batch in ep:
            if sums is not None and b < CHECK_BATCHES:
                sums.append({"batch": batch.number, "fields": field_sums(batch, names)})
            for name in names:
                sink += batch[name].numpy().item(0)
            b += 1
        batch = None  # the last batch's slot goes back before the epoch closes
    return time.perf_counter() - start


def python_options(ferry, ds, args):
    """processes= for a Python dataset (ferry's own datasets take none)."""
    if isinstance(ds, ferry.Dataset):
        return {}
    return {"processes": args.processes, "seed_python": not args.no_seed_python}


def check(ferry, ds, names, args, out):
    loader = ferry.Loader(ds, batch_size=args.batch, shuffle=False, seed=args.seed,
                          workers=args.workers, prefetch=args.prefetch, device="cpu",
                          autotune=False, **python_options(ferry, ds, args))
    sums, layout, offset, batch = [], [], 0, None
    with open(args.check, "wb") as dump, loader.epoch(0) as ep:
        for batch in ep:
            sums.append({"batch": batch.number, "fields": field_sums(batch, names)})
            for name in names:
                head = np.ascontiguousarray(batch[name].numpy()[:DUMP_SAMPLES])
                dump.write(head.tobytes())
                layout.append({"batch": batch.number, "name": name, "dtype": str(head.dtype),
                               "shape": list(head.shape), "offset": offset,
                               "nbytes": head.nbytes})
                offset += head.nbytes
            if len(sums) == CHECK_BATCHES:
                break
        batch = None
    out.update(checksum=sums, dump=args.check, dump_layout=layout)


def timed(ferry, ds, names, args, parse_s, out):
    loader = ferry.Loader(ds, batch_size=args.batch, shuffle=True, seed=args.seed,
                          workers=args.workers, prefetch=args.prefetch, device="cpu",
                          autotune=args.autotune, **python_options(ferry, ds, args))
    if args.plain:
        globals()["epoch"] = lambda loader, e, names, sums=None: plain_epoch(loader, e, names)
    sums, e = [], 0
    for w in range(args.warmup):
        epoch(loader, e, names, sums if w == 0 else None)
        e += 1
    seconds, rss, cpu = [], [], []
    mark(args, "begin")
    for r in range(args.epochs):
        c = time.process_time()
        seconds.append(epoch(loader, e, names, sums if args.warmup == 0 and r == 0 else None))
        cpu.append(time.process_time() - c)
        e += 1
        if args.rss_epochs:
            rss.append(current_rss_mb())
    mark(args, "end")
    m = float(np.median(seconds))
    n = len(ds)
    out.update(samples=n, batches_per_epoch=loader.batches_per_epoch, epoch_s=m,
               epochs_s=seconds, epoch_samples_per_s=n / m, trainer_cpu_s=float(np.median(cpu)))
    if parse_s > 0:
        total = parse_s + seconds[0]
        out.update(total_s=total, samples_per_s=n / total)
    else:
        out["samples_per_s"] = n / m
    out.update(checksum=sums, summary=loader.stats().summary())
    if args.rss_epochs:
        out["rss_mb_per_epoch"] = rss
    out["rss_end_mb"] = current_rss_mb()  # the loader still alive


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=WORKLOADS)
    p.add_argument("--data", required=True)
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--rss-epochs", action="store_true")
    p.add_argument("--autotune", action="store_true")
    p.add_argument("--plain", action="store_true")
    p.add_argument("--check")
    p.add_argument("--mark", action="store_true")
    p.add_argument("--import-torch", action="store_true")
    p.add_argument("--no-seed-python", action="store_true")
    p.add_argument("--processes", type=int, default=0)
    args = p.parse_args()
    if args.import_torch:
        import torch  # noqa: F401
    import ferry
    out = {"side": "ferry-python", "workload": args.workload, "ferry_version": ferry.__version__,
           "python_version": sys.version.split()[0], "workers": args.workers,
           "batch": args.batch, "prefetch": args.prefetch,
           # The Python loader adds one slot for the batch the for loop still holds.
           "staging_slots": args.prefetch + 1, "torch_imported": "torch" in sys.modules}
    start = time.perf_counter()
    ds = dataset(ferry, args, out)
    open_s = time.perf_counter() - start
    out["open_s"] = open_s
    if isinstance(ds, ferry.Dataset):
        names = [f[0] for f in ds.fields]
    else:
        names = list(ds[0].keys())
    if args.check:
        check(ferry, ds, names, args, out)
    else:
        timed(ferry, ds, names, args, open_s if args.workload == "csv" else 0.0, out)
    out["peak_rss_mb"] = peak_rss_mb()
    out["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
