# AVI with B-frames (H.264, MPEG-4 Part 2/Xvid, MPEG-2; AVI stores no presentation timestamps):
#  (1) SILENTLY WRONG FRAMES: a clip asked for frames k (clip_frames) holds frames k - d of the
#      decode from the start (d = the B-frame delay: 2 for x264 bframes=3, 1 for Xvid bf=2);
#  (2) clips that start at frame 0 (or 1) are a DataError "the decode from the first keyframe
#      starts past frame 0": every sample under start="start" and start="uniform".
# PyAV/ffmpeg decode all 80 frames. The same streams without B-frames are exact (control).
from _util import *
R = '/tmp/attack50/repro/r1'; shutil.rmtree(R, ignore_errors=True)
for name, args in [('h264_b.avi', X264B), ('xvid_b.avi', ['-c:v', 'mpeg4', '-vtag', 'xvid', '-q:v', '1', '-bf', '2', '-g', '12']),
                   ('mpeg2_b.avi', ['-c:v', 'mpeg2video', '-q:v', '1', '-bf', '2', '-g', '15']),
                   ('xvid_nob.avi', ['-c:v', 'mpeg4', '-vtag', 'xvid', '-q:v', '1', '-bf', '0', '-g', '12'])]:
    p = f'{R}/{name}/c/{name}'; encode(p, 80, args)
    ref = pyav_frames(p)
    ds = ferry.VideoFolder(f'{R}/{name}', frames=7, stride=5, size=(H, W), start='center')
    clip = next(iter(ferry.Loader(ds, batch_size=1, device='cpu').epoch(0)))['video'].numpy()[0]
    got = [[k for k in range(len(ref)) if np.array_equal(ref[k], f)] for f in clip]
    print(f'{name}: center clip asked for frames {list(ds.clip_frames(0, 0))}, holds PyAV frames {sum(got, [])}')
    try:
        ferry_whole(f'{R}/{name}', 8); print('   start="start": ok')
    except ferry.DataError as e:
        print('   start="start": DataError:', str(e).split(': ', 3)[-1])
