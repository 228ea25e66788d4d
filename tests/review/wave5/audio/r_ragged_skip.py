# Whole files (clip_seconds=0, a ragged field) with one corrupt file: on_error="skip" should
# leave that sample out and count it; instead Loader() itself raises the file's DataError.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/rs"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
for i in range(4):
    sf.write(f"{d}/a/{i}.wav", np.full(1600 * (i + 1), 0.1, np.float32), 16000)
open(d + "/a/bad.wav", "wb").write(b"not a wav file at all" * 10)
ds = ferry.AudioFolder(d)                    # clip_seconds=0: ragged "audio"
for kw in [dict(), dict(ragged="pack"), dict(max_tokens=20000)]:
    try:
        L = ferry.Loader(ds, batch_size=2, device="cpu", on_error="skip", **kw)
        n = sum(len(b.indices) for b in L.epoch(0))
        print(kw, "ok:", n, "samples, skipped", L.stats().skipped)
    except Exception as e:
        print(kw, "FAIL:", type(e).__name__, e)
