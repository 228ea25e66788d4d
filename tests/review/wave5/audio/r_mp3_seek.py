# An MP3 read at its own rate (no resampling): a clip (crop="center") differs from the same frames
# of the whole-file decode in its first few hundred samples, by up to ~0.2-0.45 (contract: within 3e-7).
import os, shutil, subprocess, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/mseek"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sr = 16000; n = sr * 20; t = np.arange(n) / sr
x = (0.3 * np.sin(2 * np.pi * (200 + 50 * t) * t) + 0.05 * np.random.default_rng(2).standard_normal(n)).astype(np.float32)
sf.write(d + "/x.wav", x, sr, subtype="FLOAT")
subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", d + "/x.wav", "-c:a", "libmp3lame", d + "/a/x.mp3"], check=True)
one = lambda **kw: [b["audio"].numpy()[0] for b in ferry.Loader(ferry.AudioFolder(d, **kw), batch_size=1, device="cpu").epoch(0)][0]
whole = one()                                   # sample_rate=16000 = the file's rate
for clip in [15.24, 15.0, 5.0]:
    got = one(clip_seconds=clip, crop="center"); s = (len(whole) - len(got)) // 2
    e = np.abs(got - whole[s:s + len(got)])
    print(f"clip {clip}: start {s}, max |clip - whole| = {e.max():.3g}, samples off by >1e-6: {(e > 1e-6).sum()} (first {np.nonzero(e > 1e-6)[0][:1]})")
