# A single-stream MP4 whose LAST frame is held for 10 s (its stts gives the last sample a 10 s
# delta; slideshows and screen recordings do this) is refused as "truncated": the stream duration
# includes the last frame's display time, ferry's "frames cover" estimate does not. ffmpeg and
# PyAV decode its 20 frames without a complaint. (Built by patching an ffmpeg MP4's stts/durations.)
from _util import *
import struct
R = '/tmp/attack50/repro/r9'; shutil.rmtree(R, ignore_errors=True)
src = f'{R}/src.mp4'; encode(src, 20, ['-c:v', 'libx264', '-qp', '1'])
d0 = open(src, 'rb').read()
def boxes(b, s=0, e=None, path=()):
    e = len(b) if e is None else e; i = s
    while i + 8 <= e:
        sz, t = struct.unpack('>I4s', b[i:i + 8]); yield path + (t,), i, sz
        if t in (b'moov', b'trak', b'mdia', b'minf', b'stbl', b'edts'): yield from boxes(b, i + 8, i + sz, path + (t,))
        i += sz
def box(b, name): return [(i, s) for p, i, s in boxes(b) if p[-1] == name][0]
i, s = box(d0, b'stts'); n, delta = struct.unpack('>II', d0[i + 16:i + 24]); assert n == 20
mi, _ = box(d0, b'mdhd'); ts = struct.unpack('>I', d0[mi + 20:mi + 24])[0]
new = struct.pack('>I4sIIIIII', 32, b'stts', 0, 2, 19, delta, 1, 10 * ts)
d = bytearray(d0[:i] + new + d0[i + s:])
for p, bi, bs in boxes(d0):
    if p[-1] in (b'moov', b'trak', b'mdia', b'minf', b'stbl') and bi < i < bi + bs: struct.pack_into('>I', d, bi, bs + len(new) - s)
extra = 10 * ts - delta
mi, _ = box(d, b'mdhd'); struct.pack_into('>I', d, mi + 24, struct.unpack('>I', d[mi + 24:mi + 28])[0] + extra)
vi, _ = box(d, b'mvhd'); mts = struct.unpack('>I', d[vi + 20:vi + 24])[0]
for name, off in [(b'mvhd', 24), (b'tkhd', 28), (b'elst', 16)]:
    try: bi, _ = box(d, name)
    except IndexError: continue
    struct.pack_into('>I', d, bi + off, struct.unpack('>I', d[bi + off:bi + off + 4])[0] + extra * mts // ts)
p = f'{R}/c/v.mp4'; os.makedirs(os.path.dirname(p)); open(p, 'wb').write(d)
print('ffprobe stream duration, frames:', subprocess.run(['ffprobe', '-v', 'error', '-show_entries', 'stream=duration,nb_frames', '-of', 'csv=p=0', p], capture_output=True, text=True).stdout.strip())
print('ffmpeg full decode errors:', repr(subprocess.run(['ffmpeg', '-v', 'error', '-i', p, '-f', 'null', '-'], capture_output=True, text=True).stderr))
ref = pyav_frames(p)
try:
    got = ferry_whole(R, len(ref)); print('PyAV', len(ref), 'frames; ferry OK')
except ferry.DataError as e:
    print('PyAV', len(ref), 'frames; ferry DataError:', e)
