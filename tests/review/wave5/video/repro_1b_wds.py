# F1/F2 through WebDataset members (decoded from memory): an .avi member with B-frames and an
# .mkv member whose timestamps start at 37.5 s are DataErrors; the .mp4 control decodes.
from _util import *
import tarfile, io
R = '/tmp/attack50/repro/r1b'; shutil.rmtree(R, ignore_errors=True); os.makedirs(R)
encode(f'{R}/a.avi', 40, X264B); encode(f'{R}/m.mp4', 40, X264B)
subprocess.run(['ffmpeg', '-loglevel', 'error', '-i', f'{R}/m.mp4', '-c', 'copy', '-output_ts_offset', '37.5', f'{R}/k.mkv'], check=True)
for ext, f in [('mp4', 'm.mp4'), ('avi', 'a.avi'), ('mkv', 'k.mkv')]:
    t = f'{R}/{ext}.tar'
    with tarfile.open(t, 'w') as tf:
        d = open(f'{R}/{f}', 'rb').read(); ti = tarfile.TarInfo(f'0000.{ext}'); ti.size = len(d); tf.addfile(ti, io.BytesIO(d))
    ds = ferry.WebDataset(t, video=dict(frames=4, size=(H, W), start='start'))
    try:
        next(iter(ferry.Loader(ds, batch_size=1, device='cpu').epoch(0))); print(ext, 'ok')
    except ferry.DataError as e: print(ext, 'DataError:', e)
