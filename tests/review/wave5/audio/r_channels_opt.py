# channels is documented as 0 (keep), 1 or 2; 3 passes open() and fails every sample as a
# DataError blaming the file, and channels=0 over a >256-channel first file raises ConfigError
# from open() claiming the *option* was 257.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/ch"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/x.wav", np.zeros(1600, np.float32), 16000)
try:
    ds = ferry.AudioFolder(d, channels=3); print("channels=3: open ok, fields", ds.fields)
    for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0): pass
except Exception as e:
    print("channels=3:", type(e).__name__, e)
try:
    ferry.AudioFolder(d, channels=1000)
except Exception as e:
    print("channels=1000:", type(e).__name__, e)
os.remove(d + "/a/x.wav")
sf.write(d + "/a/x.wav", np.zeros((1600, 257), np.float32), 16000, subtype="PCM_16")
sf.write(d + "/a/y.wav", np.zeros((1600, 2), np.float32), 16000, subtype="PCM_16")
try:
    ds = ferry.AudioFolder(d, channels=0, clip_seconds=0.05); print("keep 257ch: open ok")
except Exception as e:
    print("channels=0 over a 257-channel file: open() raised", type(e).__name__, e)
