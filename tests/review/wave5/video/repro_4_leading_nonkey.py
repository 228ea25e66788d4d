# A stream that begins with non-keyframes (a copy cut that kept the frames before the first
# keyframe, as live recordings joined mid-GOP do): PyAV/ffmpeg decode 67 frames from the first
# keyframe on, ferry raises a DataError for every sample (even clips wholly after the keyframe).
from _util import *
R = '/tmp/attack50/repro/r4'; shutil.rmtree(R, ignore_errors=True)
src = f'{R}/src.mp4'; encode(src, 84, X264B)
for ext in ['mkv', 'mp4']:
    p = f'{R}/{ext}/c/v.{ext}'; os.makedirs(os.path.dirname(p))
    subprocess.run(['ffmpeg', '-loglevel', 'error', '-i', src, '-ss', '0.5', '-c', 'copy', '-copyinkf', p], check=True)
    ref = pyav_frames(p)
    ds = ferry.VideoFolder(f'{R}/{ext}', frames=4, size=(H, W), start='random', clips_per_video=8)
    ldr = ferry.Loader(ds, batch_size=1, device='cpu', on_error='skip')
    n = sum(len(b.indices) for b in ldr.epoch(0))
    print(ext, 'PyAV', len(ref), 'frames; ferry frame_count', ds.frame_count(0), '; delivered', n, 'of', len(ds))
    print('   ', sorted(ldr.stats().skip_reasons)[0])
    # the clips that are delivered: which frames of the decode from the start do they hold?
    ds = ferry.VideoFolder(f'{R}/{ext}', frames=4, stride=5, size=(H, W), start='center')
    clip = next(iter(ferry.Loader(ds, batch_size=1, device='cpu').epoch(0)))['video'].numpy()[0]
    print('    center clip asked for frames', list(ds.clip_frames(0, 0)), 'holds PyAV frames',
          sum([[k for k in range(len(ref)) if np.array_equal(ref[k], f)] for f in clip], []))
