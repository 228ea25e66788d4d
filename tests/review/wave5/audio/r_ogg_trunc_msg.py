# A truncated Ogg Vorbis file is reported as "1152921504606847 s long by its header ... more than
# max_seconds" (libsndfile's "unknown length" taken as a length), not as truncated/corrupt.
import os, shutil, subprocess, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/ot"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/x.wav", (0.3 * np.random.default_rng(0).standard_normal(8000 * 3)).astype(np.float32), 8000)
subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", d + "/x.wav", "-c:a", "libvorbis", d + "/x.ogg"], check=True)
data = open(d + "/x.ogg", "rb").read(); open(d + "/a/t.ogg", "wb").write(data[: len(data) // 3])
try:
    ferry.AudioFolder(d).length(0, "audio")
except ferry.DataError as e:
    print("DataError:", e)
