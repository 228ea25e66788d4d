#!/usr/bin/python3
"""bench/py/tables_side.py: bench/tables' numeric table from Python, for the ratio users quote.

  tables_side.py torch DIR ROWS REPS   pandas reads the CSV twin (DIR/numeric.csv, written here
                                       from the same formulas as bench/table/write_numeric.js
                                       when missing: Debian's pandas cannot read Parquet), the
                                       columns become a torch TensorDataset, and
                                       DataLoader(batch_size=256, shuffle=True, num_workers=2,
                                       persistent_workers=True) reads it;
  tables_side.py ferry DIR ROWS REPS   ferry.ParquetDataset(DIR/numeric.parquet) through
                                       ferry.Loader(batch_size=256, shuffle=True, workers=2,
                                       autotune=False).

Each prints "open S" (seconds to have the dataset ready: the CSV parsed, or the footer read),
then "epoch S" per timed epoch after a warm-up one, every batch's first column touched.
"""
import os
import sys
import time

import numpy as np


def values(rows):
    r = np.arange(rows, dtype=np.int64)
    cols = {}
    for c in range(10):
        cols[f"f{c}"] = (((r * (c + 3)) % 1000).astype(np.float32) * np.float32(0.25)
                         - np.float32(c))
    for c in range(10):
        cols[f"i{c}"] = r * (c + 1) - 7 * c
    return cols


def torch_side(data, rows, reps):
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    path = os.path.join(data, "numeric.csv")
    if not os.path.exists(path) or sum(1 for _ in open(path)) != rows + 1:
        pd.DataFrame(values(rows)).to_csv(path, index=False)
    start = time.perf_counter()
    frame = pd.read_csv(path, dtype={f"f{c}": np.float32 for c in range(10)})
    ds = TensorDataset(*[torch.from_numpy(frame[name].to_numpy()) for name in frame.columns])
    print(f"open {time.perf_counter() - start:.3f}", flush=True)
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2,
                        persistent_workers=True)
    for rep in range(reps + 1):
        start = time.perf_counter()
        touched = 0
        for batch in loader:
            touched += int(batch[0][0])
        if rep > 0:
            print(f"epoch {time.perf_counter() - start:.4f}", flush=True)


def ferry_side(data, rows, reps):
    import ferry

    start = time.perf_counter()
    ds = ferry.ParquetDataset([os.path.join(data, "numeric.parquet")])
    assert len(ds) == rows, (len(ds), rows)
    print(f"open {time.perf_counter() - start:.3f}", flush=True)
    loader = ferry.Loader(ds, batch_size=256, shuffle=True, workers=2, autotune=False,
                          device="cpu")
    for rep in range(reps + 1):
        start = time.perf_counter()
        touched = 0
        for batch in loader.epoch(rep):
            touched += int(np.asarray(batch["f0"])[0])
        if rep > 0:
            print(f"epoch {time.perf_counter() - start:.4f}", flush=True)


if __name__ == "__main__":
    side, data, rows, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    {"torch": torch_side, "ferry": ferry_side}[side](data, rows, reps)
