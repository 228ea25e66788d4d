# A video (or class folder) whose name is not UTF-8 (Latin-1 names from old archives):
# its DataError has an EMPTY message (does not name the file), stats().skip_reasons and
# ds.classes raise UnicodeDecodeError. (ImageFolder behaves the same: a generic error-translation gap.)
import os, sys, shutil
sys.path.insert(0, __import__("os").environ.get("FERRY_PYTHONPATH", "build/release/python"))
import ferry
R = b'/tmp/attack50/repro/r6'; shutil.rmtree(R, ignore_errors=True)
os.makedirs(R + b'/cl\xe9ss'); open(R + b'/cl\xe9ss/bad\xff.mp4', 'wb').write(b'not a video')
ds = ferry.VideoFolder(R.decode('utf-8', 'surrogateescape'), frames=2)
try:
    for _ in ferry.Loader(ds, batch_size=1, device='cpu').epoch(0): pass
except ferry.DataError as e:
    print('DataError message:', repr(str(e)), 'args:', e.args)
try: ds.frame_count(0)
except ferry.DataError as e: print('frame_count DataError message:', repr(str(e)))
ldr = ferry.Loader(ds, batch_size=1, device='cpu', on_error='skip')
for _ in ldr.epoch(0): pass
try: print(ldr.stats().skip_reasons)
except Exception as e: print('skip_reasons ->', type(e).__name__, e)
try: print(ds.classes)
except Exception as e: print('classes ->', type(e).__name__, e)
