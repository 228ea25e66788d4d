# shared by the reproducers: frames whose gray level encodes their index; PyAV reference decode.
import os, subprocess, shutil, sys, numpy as np
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python"))
import ferry, av
W, H = 64, 48
def frame(k):
    return np.full((H, W, 3), (k * 3) % 256, np.uint8)      # gray level 3k (k < 85)
def encode(path, n, args, rate=25):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    raw = b''.join(frame(k).tobytes() for k in range(n))
    subprocess.run(['ffmpeg', '-y', '-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', f'{W}x{H}',
                    '-r', str(rate), '-i', '-', *args, path], input=raw, check=True)
def pyav_frames(path):
    with av.open(path) as c:
        return [f.to_ndarray(format='rgb24') for f in c.decode(video=0)]
def ferry_whole(root, n, **kw):
    ds = ferry.VideoFolder(root, frames=n, size=(H, W), start='start', **kw)
    b = next(iter(ferry.Loader(ds, batch_size=1, device='cpu').epoch(0)))
    return b['video'].numpy()[0]
X264B = ['-c:v', 'libx264', '-qp', '1', '-x264-params', 'scenecut=0:b-adapt=0:bframes=3:keyint=30']
