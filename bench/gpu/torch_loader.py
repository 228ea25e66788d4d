#!/usr/bin/env python3
"""PyTorch's side of bench/gpu/loader, on the same data: DataLoader(pin_memory=True) and
.to(device, non_blocking=True), with the same batches (128 uint8 images of 224x224x3), the same
worker count, and the same fixed-length step per batch (torch.cuda._sleep) for the overlap.

Usage: torch_loader.py [--quick] [--workers N]. Prints markdown rows and a summary line.
"""
import argparse
import statistics
import sys
import time

IMAGE = 224 * 224 * 3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workers", type=int, default=0, help="0: half the cores, at least 2")
    a = p.parse_args()
    try:
        import torch
        from torch.utils.data import DataLoader, TensorDataset
    except ImportError as e:
        print(f"torch_loader: PyTorch is not installed here: {e}")
        return 0
    if not torch.cuda.is_available():
        print("torch_loader: PyTorch sees no usable GPU")
        return 0
    import os
    workers = a.workers or max(2, (os.cpu_count() or 2) // 2)
    rows = 1024 if a.quick else 4096
    epochs = 3 if a.quick else 5
    batch = 128
    # The same bytes as bench/gpu/loader: (i * 31 + j * 7) % 251.
    x = torch.empty(rows, IMAGE, dtype=torch.uint8)
    j = torch.arange(IMAGE, dtype=torch.int32).unsqueeze(0)
    for start in range(0, rows, 256):
        i = torch.arange(start, min(rows, start + 256), dtype=torch.int32).unsqueeze(1)
        x[start:start + i.shape[0]] = ((i * 31 + j * 7) % 251).to(torch.uint8)
    y = torch.arange(rows, dtype=torch.int64)
    ds = TensorDataset(x, y)
    dev = torch.device("cuda:0")
    stream = torch.cuda.current_stream(dev)
    print(f"torch_loader: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"num_workers {workers}, batch {batch}, {rows} samples, {epochs} epochs after a warm-up")

    # Cycles of _sleep per second.
    s, f = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    torch.cuda._sleep(200_000_000)
    f.record()
    f.synchronize()
    cps = 200_000_000 / (s.elapsed_time(f) / 1e3)

    # The pinned peak for one batch, as the ferry side measures it.
    host = torch.empty(batch * IMAGE, dtype=torch.uint8).pin_memory()
    dst = torch.empty(batch * IMAGE, dtype=torch.uint8, device=dev)
    t = []
    for k in range(22):
        s.record()
        dst.copy_(host, non_blocking=True)
        f.record()
        f.synchronize()
        if k >= 2:
            t.append(s.elapsed_time(f) / 1e3)
    copy_s = statistics.median(t)

    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                        pin_memory=True, persistent_workers=True)

    def epoch(cycles):
        begins, ends = [], []
        t0 = time.perf_counter()
        n = 0
        for xb, yb in loader:
            xb = xb.to(dev, non_blocking=True)
            yb = yb.to(dev, non_blocking=True)
            n += xb.shape[0]
            if cycles:
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record()
                torch.cuda._sleep(cycles)
                e.record()
                begins.append(b)
                ends.append(e)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        idle = 0.0
        if begins:
            gaps = sum(ends[k - 1].elapsed_time(begins[k]) for k in range(1, len(begins))) / 1e3
            idle = gaps / (begins[0].elapsed_time(ends[-1]) / 1e3)
        return wall, idle, n

    def run(cycles):
        epoch(cycles)
        r = [epoch(cycles) for _ in range(epochs)]
        return (statistics.median(w for w, _, _ in r), statistics.median(i for _, i, _ in r),
                r[0][2])

    wall, _, n = run(0)
    gbs = n * IMAGE / wall / 1e9
    print("\n| PyTorch DataLoader(pin_memory=True) + .to(non_blocking=True) | value |")
    print("|---|---|")
    print(f"| pinned peak, one batch | {batch * IMAGE / copy_s / 1e9:.2f} GB/s |")
    print(f"| transfer, no compute | {gbs:.2f} GB/s ({gbs / (batch * IMAGE / copy_s / 1e9):.2f} "
          f"of peak) |")
    worst = 0.0
    for factor in (0.5, 1.5, 3.0):
        cycles = int(factor * copy_s * cps)
        wall, idle, n = run(cycles)
        if factor > 1:
            worst = max(worst, idle)
        print(f"| step {factor:.1f}x copy time: wall {wall:.4f} s | GPU idle between steps "
              f"{100 * idle:.2f}% |")
    print(f"\nsummary: torch H2D {gbs / (batch * IMAGE / copy_s / 1e9):.2f} of the pinned peak; "
          f"GPU idle between steps {100 * worst:.2f}% at compute > copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
