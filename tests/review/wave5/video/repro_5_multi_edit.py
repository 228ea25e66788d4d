# MP4 edit lists with several entries. "empty_mid" (0-1 s, an empty edit, then 2-3 s) holds (the
# control). "backwards" (2-3 s, then 0-1 s): a DataError for most clips though PyAV decodes 50,
# and a single frame from the middle is silently the wrong frame.
from _util import *
import struct
R = '/tmp/attack50/repro/r5'; shutil.rmtree(R, ignore_errors=True)
src = f'{R}/src.mp4'; encode(src, 97, X264B)          # moov after mdat, one elst entry
data = open(src, 'rb').read()
def boxes(b, s=0, e=None, path=()):
    e = len(b) if e is None else e; i = s
    while i + 8 <= e:
        sz, t = struct.unpack('>I4s', b[i:i + 8]); yield path + (t,), i, sz
        if t in (b'moov', b'trak', b'mdia', b'minf', b'stbl', b'edts'): yield from boxes(b, i + 8, i + sz, path + (t,))
        i += sz
el = [(i, s) for p, i, s in boxes(data) if p[-1] == b'elst'][0]
mt0 = struct.unpack('>i', data[el[0] + 20:el[0] + 24])[0]; TS, MTS = 12800, 1000   # media / movie timescales
def with_elst(entries):
    body = struct.pack('>II', 0, len(entries)) + b''.join(struct.pack('>Iihh', d, m, 1, 0) for d, m in entries)
    new = struct.pack('>I4s', 8 + len(body), b'elst') + body; delta = len(new) - el[1]
    b = bytearray(data[:el[0]] + new + data[el[0] + el[1]:])
    for p, i, s in boxes(data):
        if p[-1] in (b'moov', b'trak', b'edts') and i < el[0] < i + s: struct.pack_into('>I', b, i, s + delta)
    return bytes(b)
for name, ents in [('empty_mid', [(MTS, mt0), (MTS // 2, -1), (MTS, mt0 + 2 * TS)]), ('backwards', [(MTS, mt0 + 2 * TS), (MTS, mt0)])]:
    p = f'{R}/{name}/c/v.mp4'; os.makedirs(os.path.dirname(p)); open(p, 'wb').write(with_elst(ents))
    ref = pyav_frames(p)
    try:
        whole = ferry_whole(f'{R}/{name}', len(ref))
        print(name, 'PyAV', len(ref), 'frames; ferry whole clip equal:', all(np.array_equal(a, b) for a, b in zip(whole, ref)))
        ds = ferry.VideoFolder(f'{R}/{name}', frames=3, stride=2, size=(H, W), start='random', clips_per_video=40)
        for b in ferry.Loader(ds, batch_size=1, device='cpu').epoch(0):
            clip = b['video'].numpy()[0]; i = int(b.indices[0])
            s = ds.clip_frames(i, 0)  # only for the frame count; the real start is found by content
            starts = [k for k in range(len(whole)) if np.array_equal(whole[k], clip[0])]
            ok = any(all(np.array_equal(clip[j], whole[min(k + 2 * j, len(whole) - 1)]) for j in range(3)) for k in starts)
            if not ok:
                print('   sample', i, 'WRONG: clip frames are not frames k, k+2, k+4 of the decode from the start;',
                      'gray levels', [int(f[0, 0, 0]) for f in clip], 'whole-decode levels near there',
                      [int(whole[k][0, 0, 0]) for k in range(len(whole))])
                break
    except ferry.DataError as e:
        print(name, 'PyAV', len(ref), 'frames; ferry DataError:', e)
# "backwards": a single frame from the middle (start="center", frames=1) is silently another frame
p = f'{R}/backwards/c/v.mp4'; ref = pyav_frames(p)
ds = ferry.VideoFolder(f'{R}/backwards', frames=1, size=(H, W), start='center')
try:
    clip = next(iter(ferry.Loader(ds, batch_size=1, device='cpu').epoch(0)))['video'].numpy()[0]
    print('backwards center frames=1: asked for frame', list(ds.clip_frames(0, 0)), 'holds PyAV frame',
          [k for k in range(len(ref)) if np.array_equal(ref[k], clip[0])])
except ferry.DataError as e: print('backwards center frames=1: DataError', e)
