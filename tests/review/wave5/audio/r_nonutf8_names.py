# File and class names that are not UTF-8 (legal on Linux): AudioFolder's classes / path() raise
# UnicodeDecodeError, a bad file's DataError arrives with an EMPTY message, and
# on_error="skip" ends in UnicodeDecodeError (skip_reasons) instead of skipping.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/nu"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/ok.wav", np.zeros(1600, np.float32), 16000)
open(d.encode() + b"/a/bad\xff.wav", "wb").write(b"junk" * 10)       # corrupt, non-UTF-8 name
def show(label, f):
    try: print(label, "->", repr(f())[:150])
    except Exception as e: print(label, "->", type(e).__name__, repr(str(e))[:150])
ds = ferry.AudioFolder(d, clip_seconds=0.05)
show("classes", lambda: ds.classes)
show("path(0)", lambda: ds.path(0))
show("raise", lambda: [b for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0)])
def skip():
    L = ferry.Loader(ds, batch_size=1, device="cpu", on_error="skip")
    n = sum(len(b.indices) for b in L.epoch(0)); return (n, L.stats().skipped)
show("skip", skip)
show("skip_reasons", lambda: (lambda L: (list(L.epoch(0)) and None, L.stats().skip_reasons))(ferry.Loader(ds, batch_size=1, device="cpu", on_error="skip")))
os.makedirs(d.encode() + b"/cl\xff")
sf.write(d.encode() + b"/cl\xff/x.wav", np.zeros(1600, np.float32), 16000)
ds2 = ferry.AudioFolder(d, clip_seconds=0.05)
show("classes with a non-UTF-8 class", lambda: ds2.classes)
show("whole-file length() of the bad file", lambda: ferry.AudioFolder(d).length(0, "audio"))
