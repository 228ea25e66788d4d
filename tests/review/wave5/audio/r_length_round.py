# length() is documented as round(frames * sample_rate / file rate); 1 frame at 48 kHz -> 16 kHz
# is round(0.333) = 0 (a file with no frames), ferry answers 1.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/lr"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/x.wav", np.full(1, 0.25, np.float32), 48000, subtype="FLOAT")
ds = ferry.AudioFolder(d)
print("1 frame @48k -> length", ds.length(0, "audio"), "(round(1/3) = 0)")
