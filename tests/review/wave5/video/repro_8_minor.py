# Minor: (a) an AVI written to a pipe (non-seekable output: its header frame count is FFmpeg's
# placeholder 2^30) is refused as "truncated", though PyAV/ffmpeg decode its 40 frames;
# (b) an MP4 whose movie header (mvhd) claims 49 days passes max_seconds (only the stream's
# own duration is checked), whereas the contract says a video longer "by its header" is a DataError.
from _util import *
import struct
R = '/tmp/attack50/repro/r8'; shutil.rmtree(R, ignore_errors=True)
p = f'{R}/a/c/v.avi'; os.makedirs(os.path.dirname(p))
raw = b''.join(frame(k).tobytes() for k in range(40))
out = subprocess.run(['ffmpeg', '-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', f'{W}x{H}', '-r', '25', '-i', '-',
                      '-c:v', 'mjpeg', '-q:v', '1', '-f', 'avi', 'pipe:1'], input=raw, capture_output=True, check=True).stdout
open(p, 'wb').write(out)
print('(a) PyAV frames:', len(pyav_frames(p)))
try: ferry_whole(f'{R}/a', 40); print('(a) ferry ok')
except ferry.DataError as e: print('(a) ferry DataError:', e)
p = f'{R}/b/c/v.mp4'; encode(p, 40, X264B)
b = bytearray(open(p, 'rb').read()); i = b.find(b'mvhd') - 4
struct.pack_into('>I', b, i + 8 + 16, 0xFFFFFFFF); open(p, 'wb').write(b)   # mvhd duration, timescale 1000
print('(b) ffprobe format duration:', subprocess.run(['ffprobe', '-v', 'error', '-show_entries', 'format=duration', '-of', 'csv=p=0', p], capture_output=True, text=True).stdout.strip(), 's')
try: ferry_whole(f'{R}/b', 40); print('(b) ferry accepted it (max_seconds=14400)')
except ferry.DataError as e: print('(b) ferry DataError:', e)
