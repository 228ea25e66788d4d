# Same as r_ragged_skip.py for a WebDataset's whole .wav members: Loader(on_error="skip") raises.
import io, os, shutil, sys, tarfile, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/rsw"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
with tarfile.open(d + "/s.tar", "w") as t:
    for i in range(4):
        b = io.BytesIO(); sf.write(b, np.full(1600, 0.1, np.float32), 16000, format="WAV")
        data = b.getvalue() if i != 2 else b"junk" * 20
        for name, payload in [(f"{i:03d}.wav", data), (f"{i:03d}.cls", b"0")]:
            ti = tarfile.TarInfo(name); ti.size = len(payload); t.addfile(ti, io.BytesIO(payload))
ds = ferry.WebDataset([d + "/s.tar"], audio=dict())      # whole members: ragged
try:
    L = ferry.Loader(ds, batch_size=2, device="cpu", on_error="skip")
    print("ok:", sum(len(b.indices) for b in L.epoch(0)), "samples, skipped", L.stats().skipped)
except Exception as e:
    print("FAIL:", type(e).__name__, e)
