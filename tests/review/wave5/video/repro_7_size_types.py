# size=(h, w) with non-int members: RuntimeError with pybind11's cast message, not a TypeError
# naming `size`. (Also Loader.resume() without its argument prints pybind11's signature list.)
import sys; sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python"))
import ferry, os
os.makedirs('/tmp/attack50/repro/r7/c', exist_ok=True)
for size in [('a', 'b'), (16.5, 8), (2**31, 1)]:
    try:
        ferry.VideoFolder('/tmp/attack50/repro/r7', size=size); print(size, 'accepted')
    except Exception as e:
        print(size, '->', type(e).__name__, e)
try:
    ferry.Loader(ferry.TensorDataset({'x': __import__('numpy').zeros((4, 2), 'f4')}), batch_size=2, device='cpu').resume()
except Exception as e:
    print('Loader.resume() ->', type(e).__name__, str(e).replace('\n', ' | '))
# the same inside WebDataset's video=dict(...), and pybind11 signature lists for negative ints
import tarfile, io
t = '/tmp/attack50/repro/r7/s.tar'
with tarfile.open(t, 'w') as tf:
    ti = tarfile.TarInfo('0.cls'); ti.size = 1; tf.addfile(ti, io.BytesIO(b'0'))
for v in [dict(frames='3'), dict(size=('a', 'b'))]:
    try: ferry.WebDataset(t, video=v); print(v, 'accepted')
    except Exception as e: print('WebDataset video=', v, '->', type(e).__name__, e)
import subprocess
subprocess.run(['ffmpeg', '-y', '-loglevel', 'error', '-f', 'lavfi', '-i', 'testsrc=size=64x48:d=1', '-c:v', 'ffv1', '/tmp/attack50/repro/r7/c/v.mkv'], check=True)
ds = ferry.VideoFolder('/tmp/attack50/repro/r7', frames=2)
for call in [lambda: ds.clip_frames(-1, 0), lambda: ds.clip_frames(0, -1), lambda: ds.path(-1)]:
    try: call()
    except Exception as e: print('->', type(e).__name__, str(e).replace('\n', ' | ')[:160])
