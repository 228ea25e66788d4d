#!/usr/bin/env python3
"""Corpora converted by samples/train_tokens (--convert), mixed by weight with ferry.Mixture:
each epoch's windows per corpus, counted by the loader's stats and from the "source" field,
against the shares computed here by largest remainders. Exits 1 when an epoch is not exact.

    build/release/samples/train_tokens --convert --corpus /usr/share/games/fortunes --out /tmp/f
    build/release/samples/train_tokens --convert --corpus /usr/share/common-licenses --out /tmp/l
    PYTHONPATH=build/release/python python3 samples/python/mix_tokens.py /tmp/f:3 /tmp/l:1

The C++ twin, which also trains a model and reports bits/byte per corpus, is
`train_tokens --mix DIR:W --mix DIR:W`.
"""
import argparse
import glob
import math
import os
import sys

import numpy as np

import ferry


def largest_remainders(weights, epoch_size):
    """What Mixture promises: the floors of epoch_size x w / sum w, then one more for the
    largest fractional parts (ties to the earlier source) until they add up to epoch_size."""
    exact = [epoch_size * w / sum(weights) for w in weights]
    shares = [math.floor(x) for x in exact]
    by_rest = sorted(range(len(weights)), key=lambda k: -(exact[k] - shares[k]))  # stable
    for k in by_rest[:epoch_size - sum(shares)]:
        shares[k] += 1
    return shares


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpora", nargs="+", help="DIR:WEIGHT, a directory of train_*.bin")
    parser.add_argument("--epoch-size", type=int, default=0, help="windows an epoch (0: all)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()

    names, sources = [], []
    for spec in args.corpora:
        path, weight = spec.rsplit(":", 1)
        files = sorted(glob.glob(os.path.join(path, "train_*.bin")))
        names.append(os.path.basename(os.path.normpath(path)))
        sources.append((ferry.TokenDataset(files, seq_len=args.seq_len), float(weight)))

    mix = ferry.Mixture(sources, epoch_size=args.epoch_size, source_field="source")
    want = largest_remainders([w for _, w in sources], mix.epoch_size)
    print(f"ferry {ferry.__version__}: {len(names)} corpora, {mix.epoch_size} windows an epoch, "
          f"shares {dict(zip(names, mix.shares))}")
    loader = ferry.Loader(mix, batch_size=64, shuffle=True, seed=1, workers=1, device="cpu")

    exact = list(mix.shares) == want
    before = [0] * len(names)
    for epoch in range(args.epochs):
        seen = np.zeros(len(names), dtype=np.int64)
        for batch in loader.epoch(epoch):
            seen += np.bincount(batch["source"].numpy(), minlength=len(names))
        counted = loader.stats().source_samples
        given = [c - b for c, b in zip(counted, before)]
        before = list(counted)
        ok = given == want and seen.tolist() == want
        exact = exact and ok
        line = " ".join(f"{n} {g} / {s} / {w}" for n, g, s, w in zip(names, given, seen, want))
        print(f"epoch {epoch} shares (loader stats / source field / largest remainders): {line}: "
              f"{'exact' if ok else 'NOT EXACT'}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
