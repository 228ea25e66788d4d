# An AVI with dropped ("null", zero-size) frames - what ffmpeg's AVI muxer writes for a variable
# frame rate source, and what capture tools (VirtualDub, webcams) write for dropped frames - is
# refused as "truncated: its header counts 59 frames, the file holds 43". ffmpeg decodes it
# without an error and PyAV gives its 43 pictures.
from _util import *
import fractions
R = '/tmp/attack50/repro/r10'; shutil.rmtree(R, ignore_errors=True); os.makedirs(R)
ticks = [t for t in range(60) if t % 7 not in (3, 4)]            # a VFR source: gaps in the 25 fps grid
src = f'{R}/src.mkv'
o = av.open(src, 'w'); s = o.add_stream('ffv1', rate=25); s.width, s.height = W, H
s.pix_fmt = 'yuv444p'; s.codec_context.time_base = fractions.Fraction(1, 25)
for k, t in enumerate(ticks):
    f = av.VideoFrame.from_ndarray(frame(k), format='rgb24'); f.pts = t; f.time_base = fractions.Fraction(1, 25)
    for p in s.encode(f): o.mux(p)
for p in s.encode(): o.mux(p)
o.close()
for name, args in [('mjpeg', ['-c:v', 'mjpeg', '-q:v', '1']), ('xvid', ['-c:v', 'mpeg4', '-vtag', 'xvid', '-q:v', '1', '-bf', '0'])]:
    p = f'{R}/{name}/c/v.avi'; os.makedirs(os.path.dirname(p))
    subprocess.run(['ffmpeg', '-loglevel', 'error', '-i', src, '-fps_mode', 'passthrough', *args, p], check=True)
    err = subprocess.run(['ffmpeg', '-v', 'error', '-i', p, '-f', 'null', '-'], capture_output=True, text=True).stderr
    ref = pyav_frames(p)
    try:
        got = ferry_whole(f'{R}/{name}', len(ref)); print(name, 'ok')
    except ferry.DataError as e:
        print(name, '| ffmpeg decode errors:', repr(err[:60]), '| PyAV', len(ref), 'frames | ferry DataError:', e)
