# DESIGN (wave 5, ferry.torch.DataLoader): "batches (and their tensors) may be kept past their
# step, as list(loader) keeps them: the staging ring takes new slots for held ones, within the
# loader's memory budget". list() of a 13-batch epoch of tiny batches fails at the 6th batch.
import os, shutil, sys, numpy as np, soundfile as sf
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python")); import ferry, ferry.torch
d = "/tmp/attack49/repro/tl"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d + "/a")
for i in range(40):
    sf.write(f"{d}/a/{i:02d}.wav", np.zeros(1600, np.float32), 16000)
for name, ds in [("AudioFolder", ferry.AudioFolder(d, clip_seconds=0.1)),
                 ("TensorDataset", ferry.TensorDataset({"x": np.zeros((40, 8), np.float32)}))]:
    try:
        bs = list(ferry.torch.DataLoader(ds, batch_size=3, num_workers=2, device="cpu"))
        print(name, "list ok:", len(bs), "batches")
    except Exception as e:
        print(name, type(e).__name__, e)
