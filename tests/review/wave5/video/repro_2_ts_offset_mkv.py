# An MKV/WebM whose timestamps start at 37.5 s (ffmpeg -output_ts_offset, -copyts remuxes of
# streams/recordings) is refused as "truncated": the header's end time is compared with the frames'
# span without subtracting the start time. The same file as MP4 is fine.
from _util import *
R = '/tmp/attack50/repro/r2'; shutil.rmtree(R, ignore_errors=True)
for ext in ['mp4', 'mkv', 'webm']:
    src = f'{R}/src.{ext}'
    encode(src, 50, X264B if ext != 'webm' else ['-c:v', 'libvpx-vp9', '-lossless', '1'])
    p = f'{R}/{ext}/c/v.{ext}'; os.makedirs(os.path.dirname(p))
    subprocess.run(['ffmpeg', '-loglevel', 'error', '-i', src, '-c', 'copy', '-output_ts_offset', '37.5', p], check=True)
    ref = pyav_frames(p)
    try:
        got = ferry_whole(f'{R}/{ext}', len(ref))
        print(ext, 'PyAV', len(ref), 'frames; ferry OK, equal:', all(np.array_equal(a, b) for a, b in zip(got, ref)))
    except ferry.DataError as e:
        print(ext, 'PyAV', len(ref), 'frames; ferry DataError:', e)
