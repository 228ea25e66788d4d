"""The PyTorch half of bench/compare: each workload as a PyTorch user writes it, one process per
run, one JSON line of results on stdout (the driver reads the last line that starts with '{').

  torch_side.py inmem --data DIR      TensorDataset(images uint8 [N, 28, 28], labels int64)
  torch_side.py png   --data ROOT     torchvision ImageFolder + Grayscale(1) + ToTensor
  torch_side.py jpeg  --data ROOT     torchvision ImageFolder + Resize(256) + CenterCrop(224)
                                      + ToTensor
  torch_side.py rrc   --data ROOT     torchvision ImageFolder + RandomResizedCrop(224)
                                      + RandomHorizontalFlip + ToTensor (training's transform)
  torch_side.py csv   --data FILE     pandas.read_csv + TensorDataset (parsing timed)
  torch_side.py pyobj-numpy|pyobj-png|pyobj-jpeg|pyworkers-* --data PATH
                                      a dataset written in Python (bench/py/pyobj.py; the same
                                      object bench/py/ferry_py_side.py reads through ferry)

DataLoader(batch_size=256, shuffle=True, num_workers=--workers), its defaults otherwise (per
sample __getitem__ and default_collate, workers started per epoch). --warmup N (1) untimed epochs,
then --epochs N (1) timed ones. --check DUMP: no timing; shuffle off, num_workers 0, the first 3
batches summed (float64, per field, in memory order) and the first 64 samples of each written to
DUMP, as ferry_side does. --mark writes "@timed begin" and "@timed end" lines to stderr around the
timed epochs (bench/python samples memory between them).
"""

import argparse
import json
import resource
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import make_data
import pyobj

CHECK_BATCHES = 3
DUMP_SAMPLES = 64


def rss_mb(who):
    """ru_maxrss (KiB) of this process, or of its largest reaped child, in MB. On Linux exec keeps
    the peak of the image it replaced, so this process's figure is at least its parent's size;
    a forked DataLoader worker's counts the pages it shares with this process."""
    return resource.getrusage(who).ru_maxrss * 1024 / 1e6


def peak_rss_mb():
    """This process's own peak RSS in MB: VmHWM of /proc/self/status."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return rss_mb(resource.RUSAGE_SELF)


def dataset(args, out):
    """The workload's dataset and its field names; timed parts go into `out`."""
    if args.workload == "inmem":
        x, y = make_data.fashion_mnist(args.data)
        return TensorDataset(torch.from_numpy(x.copy()), torch.from_numpy(y)), ["image", "label"]
    if args.workload in pyobj.WORKLOADS + pyobj.PYWORKERS:
        ds = pyobj.make(args.workload, args.data)
        return ds, list(ds[0].keys())
    import torchvision
    from torchvision import transforms as T
    out["torchvision_version"] = torchvision.__version__
    if args.workload == "png":
        t = T.Compose([T.Grayscale(num_output_channels=1), T.ToTensor()])
        return torchvision.datasets.ImageFolder(args.data, transform=t), ["image", "label"]
    if args.workload == "jpeg":
        t = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()])
        return torchvision.datasets.ImageFolder(args.data, transform=t), ["image", "label"]
    if args.workload == "rrc":
        t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor()])
        return torchvision.datasets.ImageFolder(args.data, transform=t), ["image", "label"]
    raise SystemExit(f"torch_side: unknown workload {args.workload}")


def csv_dataset(path):
    """pandas.read_csv, then the feature and label columns as tensors: the usual recipe."""
    import pandas as pd
    df = pd.read_csv(path)
    features = torch.tensor(df.drop(columns="label").values, dtype=torch.float32)
    labels = torch.tensor(df["label"].values, dtype=torch.int64)
    return TensorDataset(features, labels)


def tensors(batch, names):
    """A batch's tensors in field order: a tuple's as they come, a dict's by name."""
    return [batch[n] for n in names] if isinstance(batch, dict) else list(batch)


def field_sums(batch, names):
    fields = []
    for name, t in zip(names, tensors(batch, names)):
        a = t.contiguous().numpy().reshape(-1)
        # np.cumsum adds in memory order, as ferry_side's loop does.
        total = float(np.cumsum(a, dtype=np.float64)[-1]) if a.size else 0.0
        fields.append({"name": name, "dtype": str(a.dtype), "shape": list(t.shape), "sum": total})
    return fields


def check(ds, names, args, out):
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False, num_workers=0)
    sums, layout, offset = [], [], 0
    with open(args.check, "wb") as dump:
        for b, batch in enumerate(loader):
            if b == CHECK_BATCHES:
                break
            sums.append({"batch": b, "fields": field_sums(batch, names)})
            for name, t in zip(names, tensors(batch, names)):
                head = t[:DUMP_SAMPLES].contiguous().numpy()
                dump.write(head.tobytes())
                layout.append({"batch": b, "name": name, "dtype": str(head.dtype),
                               "shape": list(head.shape), "offset": offset,
                               "nbytes": head.nbytes})
                offset += head.nbytes
    out.update(checksum=sums, dump=args.check, dump_layout=layout)


def epoch(loader, names=None, sums=None):
    """Seconds for one pass over `loader`; the first batches summed into `sums` if given."""
    start = time.perf_counter()
    sink = 0.0
    for b, batch in enumerate(loader):
        if sums is not None and b < CHECK_BATCHES:
            sums.append({"batch": b, "fields": field_sums(batch, names)})
        if names is not None:  # every batch's tensors touched, as ferry's side does
            for t in tensors(batch, names):
                sink += float(t.reshape(-1)[0])
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=["inmem", "png", "jpeg", "rrc", "csv", *pyobj.WORKLOADS,
                                        *pyobj.PYWORKERS])
    p.add_argument("--data", required=True)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--check")
    p.add_argument("--mark", action="store_true")
    p.add_argument("--persistent", action="store_true",
                   help="persistent_workers=True (the workers live across epochs)")
    args = p.parse_args()
    torch.manual_seed(args.seed)
    side = {"inmem": "pytorch", "png": "torchvision", "jpeg": "torchvision", "rrc": "torchvision",
            "csv": "pandas"}
    out = {"side": side.get(args.workload, "pytorch"), "workload": args.workload, "workers": args.workers,
           "batch": args.batch, "torch_version": torch.__version__,
           "python_version": sys.version.split()[0]}

    if args.workload == "csv":
        import pandas as pd
        out["pandas_version"] = pd.__version__
        if args.check:
            check(csv_dataset(args.data), ["features", "label"], args, out)
        else:
            # One epoch, parsing included: read_csv, the tensors, then the DataLoader.
            start = time.perf_counter()
            ds = csv_dataset(args.data)
            out["open_s"] = time.perf_counter() - start
            loader = DataLoader(ds, batch_size=args.batch, shuffle=True,
                                num_workers=args.workers)
            sums = []
            seconds = [epoch(loader, ["features", "label"], sums)]
            total = time.perf_counter() - start
            out.update(samples=len(ds), epoch_s=seconds[0], epochs_s=seconds, total_s=total,
                       samples_per_s=len(ds) / total, checksum=sums)
    else:
        start = time.perf_counter()
        ds, names = dataset(args, out)
        out["open_s"] = time.perf_counter() - start
        if args.check:
            check(ds, names, args, out)
        else:
            loader = DataLoader(ds, batch_size=args.batch, shuffle=True,
                                num_workers=args.workers,
                                persistent_workers=args.persistent and args.workers > 0)
            sums = []
            for w in range(args.warmup):
                epoch(loader, names, sums if w == 0 else None)
            if args.mark:
                print("@timed begin", file=sys.stderr, flush=True)
            seconds, cpu = [], []
            for e in range(args.epochs):
                c = time.process_time()
                seconds.append(epoch(loader, names, sums if args.warmup == 0 and e == 0 else None))
                cpu.append(time.process_time() - c)
            out["trainer_cpu_s"] = float(np.median(cpu))
            if args.mark:
                print("@timed end", file=sys.stderr, flush=True)
            m = float(np.median(seconds))
            out.update(samples=len(ds), epoch_s=m, epochs_s=seconds,
                       samples_per_s=len(ds) / m, checksum=sums)
    out["peak_rss_mb"] = peak_rss_mb()
    out["ru_maxrss_mb"] = rss_mb(resource.RUSAGE_SELF)
    out["peak_rss_children_mb"] = rss_mb(resource.RUSAGE_CHILDREN)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
