# The "audio" field is documented as f32 in [-1, 1]; a float WAV holding 1000.0 comes through
# as 1000.0 (NaN/inf are caught, out-of-range values are not), and a full-scale square wave
# resampled overshoots 1.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/fr"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/loud.wav", np.array([1000.0, -1000.0] * 4000, np.float32), 16000, subtype="FLOAT")
sq = np.where(np.arange(44100) % 100 < 50, 1.0, -1.0).astype(np.float32)
sf.write(d + "/a/square.wav", sq, 44100, subtype="PCM_16")
ds = ferry.AudioFolder(d, clip_seconds=0.5, crop="start")
for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0):
    a = b["audio"].numpy(); print(ds.path(int(b.indices[0])), "min", a.min(), "max", a.max())
