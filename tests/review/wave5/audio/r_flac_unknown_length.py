# A valid FLAC written to a pipe (STREAMINFO total_samples = 0, "unknown") is refused with a
# nonsense "576460752303423.5 s long by its header ... more than max_seconds".
import os, shutil, subprocess, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/fu"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/x.wav", (0.3 * np.sin(np.arange(16000) / 5)).astype(np.float32), 16000)
with open(d + "/a/piped.flac", "wb") as out:
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", d + "/x.wav", "-f", "flac", "-"], stdout=out, check=True)
for clip in [0, 0.5]:
    try:
        ds = ferry.AudioFolder(d, clip_seconds=clip)
        print(clip, [b["audio"].numpy().shape for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0)])
    except ferry.DataError as e:
        print("clip", clip, "DataError:", e)
