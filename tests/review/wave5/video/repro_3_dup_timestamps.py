# A high-frame-rate MKV (1500 fps; Matroska's 1 ms timestamps make some frames share a timestamp)
# is a DataError for every sample, even intra-only FFV1; PyAV decodes all 60 frames.
from _util import *
R = '/tmp/attack50/repro/r3'; shutil.rmtree(R, ignore_errors=True)
p = f'{R}/c/v.mkv'; encode(p, 60, ['-c:v', 'ffv1'], rate=1500)
ref = pyav_frames(p)
try:
    got = ferry_whole(R, len(ref))
    print('PyAV', len(ref), 'frames; ferry OK, equal:', all(np.array_equal(a, b) for a, b in zip(got, ref)))
except ferry.DataError as e:
    print('PyAV', len(ref), 'frames; ferry DataError:', e)
