# Wrong argument types/values on AudioFolder's methods give pybind11's signature list, and
# out-of-range floats for clip_seconds overflow to a wrong "less than one frame" message.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/mty"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/x.wav", np.zeros(1600, np.float32), 16000)
ds = ferry.AudioFolder(d)
for expr in ["ds.path(-1)", "ds.path('0')", "ds.label(-1)", "ds.length(-1, 'audio')",
             "ferry.AudioFolder(d, mel=dict(n_mels=2**40))",
             "ferry.AudioFolder(d, clip_seconds=1e15)", "ferry.AudioFolder(d, clip_seconds=1e300)"]:
    try:
        eval(expr); print(expr, "accepted")
    except Exception as e:
        print(expr, "->", type(e).__name__, str(e).replace("\n", " | ")[:230])
