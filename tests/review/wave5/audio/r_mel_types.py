# A wrong type inside mel=dict(...) is pybind11's RuntimeError, not a TypeError naming the key.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry
d = "/tmp/attack49/repro/mt"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
sf.write(d + "/a/x.wav", np.zeros(1600, np.float32), 16000)
for mel in [dict(n_fft="400"), dict(hop=1.5), dict(n_mels=None), dict(f_min="0"), dict(log_floor=[1e-10])]:
    try:
        ferry.AudioFolder(d, mel=mel); print(mel, "accepted")
    except Exception as e:
        print(mel, type(e).__name__, e)
for bad in [dict(audio=dict(n_fft=3)), dict(audio=dict(mel=dict(n_fft="x"))), dict(audio=5), dict(audio=dict(sample_rate="16k"))]:
    try:
        ferry.WebDataset([d + "/none.tar"], **bad); print(bad, "accepted")
    except Exception as e:
        print("WebDataset", bad, type(e).__name__, str(e)[:160])
