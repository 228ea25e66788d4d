# A FLAC cut in half: whole-file reads are a DataError, but clip reads deliver it as a valid
# sample whenever the epoch's random crop falls in the surviving half, and skip it otherwise,
# so the same corrupt file is in some epochs and not in others.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/tc"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
x = (0.3 * np.random.default_rng(0).standard_normal(16000 * 4)).astype(np.float32)
sf.write(d + "/full.flac", x, 16000)
data = open(d + "/full.flac", "rb").read()
open(d + "/a/trunc.flac", "wb").write(data[: len(data) // 2])
ds = ferry.AudioFolder(d, clip_seconds=0.5, crop="random")
L = ferry.Loader(ds, batch_size=1, device="cpu", on_error="skip")
for ep in range(8):
    n = sum(len(b.indices) for b in L.epoch(ep))
    print("epoch", ep, "delivered", n)
print("skipped in all:", L.stats().skipped)
try:
    for b in ferry.Loader(ferry.AudioFolder(d), batch_size=1, device="cpu").epoch(0): pass
except ferry.DataError as e:
    print("whole file:", e)
