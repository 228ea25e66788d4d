# VideoFolder (and WebDataset's video members) on streams whose timestamps are unusual but valid:
# AVI (no presentation timestamps) with B-frames, dropped frames, a pipe's header; frames before
# the first keyframe; timestamps that start late or that frames share; a last frame held long; MP4
# edit lists with several entries; a movie header that claims too long. Each video is tiny and
# made here with the ffmpeg program; frame n shows n in binary as 8 bars (tests/video/).
import io
import shutil
import struct
import subprocess
import tarfile

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg program")

BARS = "format=yuv420p,geq=lum='if(bitand(N\\,pow(2\\,floor(X/8)))\\,235\\,16)':cb=128:cr=128"
X264 = ["-c:v", "libx264", "-preset", "ultrafast", "-x264-params", "b-adapt=0:scenecut=0"]


def ffmpeg(*args, **kw):
    return subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
                           *map(str, args)], check=True, **kw)


def make(path, n, *args, rate=25, vf=""):
    """`path`: n frames of the bars at `rate`, encoded with `args`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ffmpeg("-f", "lavfi", "-i", f"nullsrc=s=64x48:r={rate},{BARS}{vf}", "-frames:v", n, *args,
           path)
    return path


def shown(clip):
    """The frame numbers a clip u8 [T, H, W, 3] shows: its 8 bars read at the middle row."""
    t, h, w, _ = clip.shape
    xs = [(b * 8 + 4) * w // 64 for b in range(8)]
    bits = clip[:, h // 2, xs, 1] > 128
    return [int(sum(1 << b for b in range(8) if bits[k, b])) for k in range(t)]


def first_clip(ferry, ds):
    b = next(iter(ferry.Loader(ds, batch_size=1, device="cpu")))
    return shown(np.from_dlpack(b["video"])[0])


def folder(ferry, root, frames, start="start", **kw):
    return ferry.VideoFolder(root, frames=frames, size=(24, 32), start=start, index_files=False,
                             **kw)


def check_exact(ferry, root, n):
    """Every frame from the start, a strided clip from the middle, and a uniform clip."""
    ds = folder(ferry, root, n)
    assert ds.frame_count(0) == n
    assert first_clip(ferry, ds) == list(range(n))
    for start, stride, frames in [("center", 3, 4), ("uniform", 1, 5)]:
        ds = folder(ferry, root, frames, start=start, stride=stride)
        assert first_clip(ferry, ds) == list(ds.clip_frames(0, 0))


def mp4_boxes(b, s=0, e=None, path=()):
    e = len(b) if e is None else e
    i = s
    while i + 8 <= e:
        size, kind = struct.unpack(">I4s", b[i:i + 8])
        yield path + (kind,), i, size
        if kind in (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"):
            yield from mp4_boxes(b, i + 8, i + size, path + (kind,))
        i += size


def mp4_replace(data, name, new):
    """`data` with its first box `name` replaced by `new`, the boxes around it resized."""
    at, size = next((i, s) for p, i, s in mp4_boxes(data) if p[-1] == name)
    out = bytearray(data[:at] + new + data[at + size:])
    for p, i, s in mp4_boxes(data):
        if p[-1] != name and i < at < i + s:
            struct.pack_into(">I", out, i, s + len(new) - size)
    return bytes(out)


@pytest.mark.parametrize("codec", [
    X264 + ["-bf", "3", "-g", "12"],
    ["-c:v", "mpeg4", "-q:v", "2", "-bf", "2", "-g", "8"],
    ["-c:v", "mpeg2video", "-q:v", "2", "-bf", "2", "-g", "10"],
    ["-c:v", "mpeg4", "-q:v", "2", "-bf", "0", "-g", "8"],  # no reordering: clips seek
], ids=["h264", "mpeg4", "mpeg2", "mpeg4_no_b"])
def test_avi_with_b_frames_gives_the_frames_in_presentation_order(ferry, tmp_path, codec):
    # AVI stores no presentation timestamps: frames are the decoder's, counted in its order.
    make(tmp_path / "c" / "v.avi", 30, *codec)
    check_exact(ferry, tmp_path, 30)


def test_avi_member_with_b_frames_from_memory(ferry, tmp_path):
    avi = make(tmp_path / "v.avi", 20, *X264, "-bf", "3", "-g", "10")
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        tar.add(avi, arcname="000.avi")
    ds = ferry.WebDataset(str(shard), video=dict(frames=5, stride=4, size=(24, 32), start="start"),
                          index_files=False)
    b = next(iter(ferry.Loader(ds, batch_size=1, device="cpu")))
    assert shown(np.from_dlpack(b["avi"])[0]) == [0, 4, 8, 12, 16]


@pytest.mark.parametrize("ext", ["mkv", "mp4"])
def test_frames_before_the_first_keyframe_are_not_counted(ferry, tmp_path, ext):
    src = make(tmp_path / "src.mp4", 40, *X264, "-bf", "2", "-g", "12")
    (tmp_path / "c").mkdir()
    # From 0.5 s (frame 12.5) with its non-keyframes kept: frames 13..23 cannot be decoded.
    ffmpeg("-i", src, "-ss", "0.5", "-c", "copy", "-copyinkf", tmp_path / "c" / f"v.{ext}")
    src.unlink()
    ds = folder(ferry, tmp_path, 16)
    assert ds.frame_count(0) == 16
    assert first_clip(ferry, ds) == list(range(24, 40))
    ds = folder(ferry, tmp_path, 4, start="center", stride=3)
    assert first_clip(ferry, ds) == [24 + k for k in ds.clip_frames(0, 0)]


@pytest.mark.parametrize("ext", ["mkv", "webm"])
def test_timestamps_that_start_late(ferry, tmp_path, ext):
    codec = X264 + ["-bf", "2", "-g", "8"] if ext == "mkv" else ["-c:v", "libvpx-vp9",
                                                                  "-lossless", "1", "-g", "8"]
    src = make(tmp_path / f"src.{ext}", 24, *codec)
    (tmp_path / "c").mkdir()
    ffmpeg("-i", src, "-c", "copy", "-output_ts_offset", "37.5", tmp_path / "c" / f"v.{ext}")
    src.unlink()
    check_exact(ferry, tmp_path, 24)


def test_a_last_frame_held_long(ferry, tmp_path):
    # The MP4's last sample lasts 10 s (its stts), the header's duration with it.
    src = make(tmp_path / "src.mp4", 20, *X264, "-bf", "2", "-g", "10")
    data = src.read_bytes()
    src.unlink()
    at = next(i for p, i, _ in mp4_boxes(data) if p[-1] == b"stts")
    count, delta = struct.unpack(">II", data[at + 16:at + 24])
    assert count == 20
    mdhd = next(i for p, i, _ in mp4_boxes(data) if p[-1] == b"mdhd")
    scale = struct.unpack(">I", data[mdhd + 20:mdhd + 24])[0]
    data = bytearray(mp4_replace(data, b"stts", struct.pack(">I4sIIIIII", 32, b"stts", 0, 2, 19,
                                                            delta, 1, 10 * scale)))
    extra = 10 * scale - delta  # the durations in the headers grow by as much
    boxes = {p[-1]: i for p, i, _ in reversed(list(mp4_boxes(data)))}
    movie = struct.unpack(">I", data[boxes[b"mvhd"] + 20:boxes[b"mvhd"] + 24])[0]
    for name, at, grow in [(b"mdhd", 24, extra), (b"mvhd", 24, extra * movie // scale),
                           (b"tkhd", 28, extra * movie // scale),
                           (b"elst", 16, extra * movie // scale)]:
        if name in boxes:
            old = struct.unpack(">I", data[boxes[name] + at:boxes[name] + at + 4])[0]
            struct.pack_into(">I", data, boxes[name] + at, old + grow)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v.mp4").write_bytes(data)
    check_exact(ferry, tmp_path, 20)


def test_avi_with_dropped_frames(ferry, tmp_path):
    # Gaps in the timestamps: the AVI muxer writes empty ("dropped") frames, which the header's
    # frame count counts; intra-only MJPEG, so that clips seek.
    make(tmp_path / "c" / "v.avi", 24, "-fps_mode", "passthrough", "-c:v", "mjpeg", "-q:v", "2",
         vf=",setpts='(N+floor(N/3))/(25*TB)'")
    check_exact(ferry, tmp_path, 24)


def test_avi_written_to_a_pipe(ferry, tmp_path):
    # Its header's frame count is the muxer's placeholder, 2^30.
    out = ffmpeg("-f", "lavfi", "-i", f"nullsrc=s=64x48:r=25,{BARS}", "-frames:v", 20, "-c:v",
                 "mjpeg", "-q:v", "2", "-f", "avi", "pipe:1", capture_output=True).stdout
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v.avi").write_bytes(out)
    check_exact(ferry, tmp_path, 20)


def test_a_cut_avi_is_still_a_data_error(ferry, tmp_path):
    avi = make(tmp_path / "src.avi", 40, "-c:v", "mjpeg", "-q:v", "2")
    data = avi.read_bytes()
    avi.unlink()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v.avi").write_bytes(data[:len(data) // 2])
    with pytest.raises(ferry.DataError, match="v.avi"):
        first_clip(ferry, folder(ferry, tmp_path, 4))


def test_frames_that_share_a_timestamp_come_in_decoding_order(ferry, tmp_path):
    # 1500 fps in Matroska's millisecond timestamps.
    make(tmp_path / "c" / "v.mkv", 30, "-c:v", "ffv1", rate=1500)
    check_exact(ferry, tmp_path, 30)


def test_mp4_edit_lists_with_several_entries(ferry, tmp_path):
    src = make(tmp_path / "src.mp4", 30, *X264, "-bf", "2", "-g", "12")
    data = src.read_bytes()
    src.unlink()
    at = next(i for p, i, _ in mp4_boxes(data) if p[-1] == b"elst")
    media0 = struct.unpack(">i", data[at + 20:at + 24])[0]
    scale = 12800  # the media timescale (25 fps); the movie's is 1000

    def with_edits(name, entries):
        body = struct.pack(">II", 0, len(entries)) + b"".join(
            struct.pack(">Iihh", d, m, 1, 0) for d, m in entries)
        (tmp_path / name / "c").mkdir(parents=True)
        (tmp_path / name / "c" / "v.mp4").write_bytes(
            mp4_replace(data, b"elst", struct.pack(">I4s", 8 + len(body), b"elst") + body))
        return tmp_path / name

    # 0.4 s, then an empty 0.2 s, then 0.4 s from 0.8 s on: the frames FFmpeg (and PyAV) give,
    # 0-9, 0-2 (for the empty edit), then 20-29.
    gap = with_edits("gap", [(400, media0), (200, -1), (400, media0 + scale * 8 // 10)])
    want = list(range(10)) + [0, 1, 2] + list(range(20, 30))
    assert first_clip(ferry, folder(ferry, gap, 23)) == want
    ds = folder(ferry, gap, 4, start="center", stride=4)
    assert first_clip(ferry, ds) == [want[k] for k in ds.clip_frames(0, 0)]
    # 0.8 s on first, then 0 s on: the media is shown out of its order; refused, never a frame
    # that is another one.
    back = with_edits("back", [(400, media0 + scale * 8 // 10), (400, media0)])
    for start in ["start", "center"]:
        with pytest.raises(ferry.DataError, match="v.mp4.*edit list"):
            first_clip(ferry, folder(ferry, back, 1, start=start))


def test_an_mp4_edit_list_that_cuts_media_out_is_not_truncation(ferry, tmp_path):
    # 60 frames, a keyframe every 5; shown: 0.4 s from 0 s, then 0.4 s from 1.0 s (frames 0-9,
    # 25-34, as PyAV gives them). Fewer packets than the sample tables' 60 frames: "truncated:
    # its header counts 60 frames, the file holds 27" refused it.
    src = make(tmp_path / "src.mp4", 60, *X264, "-bf", "2", "-g", "5")
    data = src.read_bytes()
    at = next(i for p, i, _ in mp4_boxes(data) if p[-1] == b"elst")
    media0 = struct.unpack(">i", data[at + 20:at + 24])[0]
    body = struct.pack(">II", 0, 2) + struct.pack(">Iihh", 400, media0, 1, 0) + \
        struct.pack(">Iihh", 400, media0 + 12800, 1, 0)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v.mp4").write_bytes(
        mp4_replace(data, b"elst", struct.pack(">I4s", 8 + len(body), b"elst") + body))
    src.unlink()
    ds = folder(ferry, tmp_path, 20)
    assert ds.frame_count(0) == 20
    assert first_clip(ferry, ds) == list(range(10)) + list(range(25, 35))
    # (An MP4 cut short for real: video_faults_test's cut_data.mp4.)


def test_a_movie_header_longer_than_max_seconds(ferry, tmp_path):
    src = make(tmp_path / "src.mp4", 10, *X264)
    data = bytearray(src.read_bytes())
    src.unlink()
    mvhd = next(i for p, i, _ in mp4_boxes(data) if p[-1] == b"mvhd")
    struct.pack_into(">I", data, mvhd + 24, 0xFFFFFFFF)  # 49 days at 1000 a second
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "v.mp4").write_bytes(data)
    with pytest.raises(ferry.DataError, match="v.mp4.*max_seconds"):
        first_clip(ferry, folder(ferry, tmp_path, 2))


@pytest.mark.parametrize("size", [("a", "b"), (16.5, 8), (2**31, 1), (8, None)])
def test_size_members_that_are_no_ints_are_a_type_error(ferry, tmp_path, size):
    (tmp_path / "c").mkdir()
    with pytest.raises(TypeError, match="size"):
        ferry.VideoFolder(tmp_path, size=size, index_files=False)
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("0.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"0"))
    with pytest.raises(TypeError, match="size"):
        ferry.WebDataset(str(shard), video=dict(size=size), index_files=False)


def test_an_avi_index_kept_beside_it_numbers_the_same_frames(ferry, tmp_path):
    make(tmp_path / "c" / "v.avi", 24, *X264, "-bf", "3", "-g", "8")
    got = []
    for _ in range(2):  # the second open reads the sidecar
        ds = ferry.VideoFolder(tmp_path, frames=4, stride=5, size=(24, 32), start="center")
        got.append((ds.frame_count(0), first_clip(ferry, ds), list(ds.clip_frames(0, 0))))
    assert (tmp_path / "c" / "v.avi.ferryidx").exists()
    assert got[0] == got[1] and got[0][1] == got[0][2] and got[0][0] == 24


@pytest.mark.parametrize("codec", ["h264", "hevc", "mpeg4", "mjpeg"])
def test_a_frame_damaged_inside_its_packet_is_a_data_error(ferry, tmp_path, codec):
    # Bytes flipped inside the 6th packet, the container intact: the decoders conceal the damage
    # (H.264's and MPEG-4's mark the frame, HEVC's and MJPEG's are told to fail), and a clip that
    # shows it, or starts after it in its GOP, is a DataError naming the frame, not damaged
    # pixels.
    av = pytest.importorskip("av")
    ext, args = {"h264": ("mkv", "-c:v libx264 -crf 18 -bf 0 -g 20 -pix_fmt yuv420p"),
                 "hevc": ("mkv", "-c:v libx265 -x265-params log-level=0:keyint=20:bframes=0"),
                 "mpeg4": ("avi", "-c:v mpeg4 -q:v 3 -g 20"),
                 "mjpeg": ("avi", "-c:v mjpeg -q:v 3")}[codec]
    if codec == "hevc" and "libx265" not in subprocess.run(
            ["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True).stdout:
        pytest.skip("no libx265 encoder")
    path = tmp_path / "c" / f"x.{ext}"
    path.parent.mkdir()
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=1.6", *args.split(), path)
    with av.open(str(path)) as c:
        pos, size = [(p.pos, p.size) for p in c.demux(video=0) if p.size][5]
    clean = path.read_bytes()
    for seed in range(40):  # the first damage ffmpeg itself reports
        damaged = bytearray(clean)
        rng = np.random.default_rng(seed)
        for _ in range(40):
            damaged[pos + size // 3 + int(rng.integers(0, size // 2))] ^= int(rng.integers(1, 256))
        path.write_bytes(damaged)
        said = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "null", "-"],
                              capture_output=True, text=True).stderr
        if said.strip():
            break
    else:
        pytest.fail("no damage that ffmpeg reports")
    # frame 5; frames 16-23, in the damaged frame's GOP (0-19), but every MJPEG frame is a
    # keyframe: that clip is whole there
    for start, frames in (("start", 40), ("center", 8)):
        ds = ferry.VideoFolder(tmp_path, frames=frames, size=(60, 80), start=start,
                               index_files=False)
        if codec == "mjpeg" and start == "center":
            assert ds[0]["video"].shape == (8, 60, 80, 3)
            continue
        with pytest.raises(ferry.DataError, match=r"x\." + ext + ": corrupt data at frame 5"):
            ds[0]


@pytest.mark.parametrize("ext", ["webm", "mkv"])
def test_a_short_video_cut_short_is_a_data_error(ferry, tmp_path, ext):
    # 1.6 s cut to 60 % of its bytes: the header still says 1.6 s; its frames cover about half.
    # A slack of a second let it through, its clips repeating the last frame left.
    codec = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "400k"] \
        if ext == "webm" else X264
    path = make(tmp_path / "c" / f"x.{ext}", 40, *codec)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) * 6 // 10])
    with pytest.raises(ferry.DataError, match=f"x.{ext}: truncated: its header claims 1.6"):
        folder(ferry, tmp_path, 40)[0]


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
def test_a_short_video_whose_timestamps_start_late_is_read(ferry, tmp_path, ext):
    # Its first timestamp at 20000 s (a clip cut from a long recording, keeping its times): an
    # MP4's header counts 20001.6 s from time 0, which max_seconds (4 hours) refused.
    src = make(tmp_path / "src.mp4", 40, *X264, "-bf", "2", "-g", "12")
    (tmp_path / "c").mkdir()
    ffmpeg("-i", src, "-c", "copy", "-output_ts_offset", "20000", tmp_path / "c" / f"x.{ext}")
    ds = folder(ferry, tmp_path, 8, start="center")
    assert ds.frame_count(0) == 40
    assert first_clip(ferry, ds) == list(range(16, 24))


def test_an_avi_stream_copied_from_matroska_is_read_whole(ferry, tmp_path):
    # ffmpeg's stream copy of an MKV into AVI stores it at twice the rate, an empty chunk after
    # each frame, and the demuxer leaves out the last one: "its header counts 80 frames, the
    # file holds 79" refused a whole file.
    src = make(tmp_path / "src.mkv", 40, "-c:v", "mpeg4", "-q:v", "2", "-g", "10")
    (tmp_path / "c").mkdir()
    ffmpeg("-i", src, "-c", "copy", tmp_path / "c" / "x.avi")
    check_exact(ferry, tmp_path, 40)


def test_clips_of_an_intra_refresh_video_are_its_frames(ferry, tmp_path):
    # x264's intra refresh: no I-frame after the first, and the container marks the recovery
    # points (P-frames refreshed a column at a time) as keyframes. A clip decoded from one held
    # frames that lacked their references (grey, 80 levels off); it is decoded from the start.
    make(tmp_path / "c" / "v.mp4", 100, "-c:v", "libx264", "-preset", "ultrafast", "-bf", "0",
         "-x264-params", "intra-refresh=1:keyint=20:scenecut=0")
    ds = folder(ferry, tmp_path, 4, start="random", clips_per_video=12)
    assert ds.frame_count(0) == 100
    got = []
    for b in ferry.Loader(ds, batch_size=4, device="cpu"):
        for clip in np.from_dlpack(b["video"]):
            f = shown(clip)
            got.append(f)
            assert f == list(range(f[0], f[0] + 4)), f
    assert len(got) == 12 and max(g[0] for g in got) > 20  # clips past the first refresh
