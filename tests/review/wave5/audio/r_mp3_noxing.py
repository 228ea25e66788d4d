# Valid MP3s without a Xing/LAME header (ffmpeg -write_xing 0): ferry either refuses a valid
# CBR file as "truncated or corrupt" or silently returns a fraction of a VBR file.
import os, shutil, subprocess, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/mp3nx"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/src")
rng = np.random.default_rng(0)
x = (0.3 * np.sin(2 * np.pi * np.cumsum(rng.uniform(100, 3000, 44100 * 3)) / 44100)).astype(np.float32)
sf.write(d + "/src/x.wav", x, 44100)                     # 3.0 s
for name, args in [("cbr", ["-b:a", "128k"]), ("vbr", ["-q:a", "9"])]:
    os.makedirs(f"{d}/{name}/a")
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", d + "/src/x.wav", "-c:a", "libmp3lame",
                    *args, "-write_xing", "0", f"{d}/{name}/a/x.mp3"], check=True)
    ds = ferry.AudioFolder(f"{d}/{name}")               # 16 kHz, whole file
    print(name, "length():", ds.length(0, "audio"), "(3.0 s would be 48000)")
    try:
        for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0):
            print(name, "read:", b["audio"].numpy().shape)
    except ferry.DataError as e:
        print(name, "DataError:", e)
