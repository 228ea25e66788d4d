# A valid 1 Hz WAV (3000 frames, 6 KB) read with sample_rate=4194304 (the top of the accepted
# range 1..4194304): clip_seconds=0.05, crop="random" -> SIGSEGV in soxr_output called from
# ferry::detail::audio::ClipWriter::resample_from (memcpy); crop="start" -> no answer in 30 s;
# whole file (clip 0) of 3 frames at sample_rate=2000000 -> no answer in 30 s.
# Each case runs in a child process; rc -11 is SIGSEGV, "HANG" a 30 s timeout.
import os, shutil, struct, subprocess, sys
CASE = r'''
import os, sys, struct, numpy as np
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
sr_file, n, target, clip, crop, d = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
os.makedirs(d + "/a", exist_ok=True)
data = np.random.default_rng(0).integers(-9000, 9000, n, dtype=np.int16).tobytes()
fmt = struct.pack("<HHIIHH", 1, 1, sr_file, sr_file * 2, 2, 16)
body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data)) + data
open(d + "/a/x.wav", "wb").write(b"RIFF" + struct.pack("<I", len(body)) + body)
ds = ferry.AudioFolder(d, sample_rate=target, clip_seconds=clip, crop=crop)
print([b["audio"].numpy().shape for b in ferry.Loader(ds, batch_size=1, device="cpu").epoch(0)])
'''
for k, args in enumerate([(1, 3000, 4194304, 0.05, "random"), (1, 3000, 4194304, 0.05, "start"),
                          (1, 3, 2000000, 0, "random"), (1, 3000, 2000000, 0.05, "random")]):
    d = f"/tmp/attack49/repro/er{k}"; shutil.rmtree(d, ignore_errors=True)
    try:
        p = subprocess.run([sys.executable, "-c", CASE, *map(str, args), d], capture_output=True, text=True, timeout=30)
        print(args, "rc", p.returncode, (p.stdout + p.stderr).strip()[-150:])
    except subprocess.TimeoutExpired:
        print(args, "HANG (30 s)")
