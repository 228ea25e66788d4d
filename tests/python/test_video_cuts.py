# ferry.VideoFolder on valid videos that begin mid-stream (stream copies cut from the middle:
# leading frames that cannot be decoded), on a container damaged in the middle, and the errors of
# its methods' and options' arguments. Videos made by the ffmpeg program: frame n shows n in
# binary as 8 vertical bars (as tests/video/make_fixtures.sh's).
import os
import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg program")

SCRIPT = r"""
set -euo pipefail
cd "$1"
bars="format=yuv420p,geq=lum='if(bitand(N\,pow(2\,floor(X/8)))\,235\,16)':cb=128:cr=128"
src="nullsrc=s=64x48:r=25,$bars"
ff() { ffmpeg -hide_banner -loglevel error -nostdin -y "$@"; }
# an open GOP (leading B-frames refer to the GOP before), cut at a keyframe by a stream copy
ff -f lavfi -i "$src" -frames:v 60 -c:v libx264 -preset veryfast -qp 10 -bf 3 \
   -x264-params keyint=20:min-keyint=20:open-gop=1:scenecut=0:b-adapt=0 opengop.mkv
ff -ss 1.0 -i opengop.mkv -c copy opengopcut.mkv
ff -f lavfi -i "$src" -frames:v 60 -c:v mpeg2video -g 15 -bf 2 -q:v 2 mpeg2.mkv
ff -ss 1.0 -i mpeg2.mkv -c copy mpeg2cut.mkv
# MPEG-4 with B-frames cut mid-GOP, starting on non-keyframes (-copyinkf)
ff -f lavfi -i "$src" -frames:v 60 -c:v mpeg4 -bf 2 -g 12 -q:v 2 mpeg4b.avi
ff -fflags +genpts -i mpeg4b.avi -c copy mpeg4b.mkv
ff -i mpeg4b.avi -ss 0.5 -copyinkf -c copy pcut.avi
ff -i mpeg4b.mkv -ss 0.5 -copyinkf -c copy pcut.mkv
ff -f lavfi -i "$src" -frames:v 60 -c:v ffv1 -level 3 -slicecrc 1 -g 1 ffv1.mkv
"""

# file: the frame number its frame 0 shows (its first keyframe); all end at the source's 59.
CUTS = {"opengopcut.mkv": 20, "mpeg2cut.mkv": 15, "pcut.avi": 24, "pcut.mkv": 24}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    out = tmp_path_factory.mktemp("video_cuts")
    subprocess.run(["bash", "-c", SCRIPT, "script", str(out)], check=True)
    # 3000 bytes at 30 % of an FFV1 Matroska file overwritten: the demuxer skips a region of
    # frames, and the frames after it still end where the header says
    b = bytearray((out / "ffv1.mkv").read_bytes())
    at = len(b) * 3 // 10
    b[at:at + 3000] = bytes((i * 131 + 7) % 256 for i in range(3000))
    (out / "corrupt_ffv1.mkv").write_bytes(bytes(b))
    return out


def root_of(tmp_path, videos, name):
    (tmp_path / "c").mkdir()
    os.symlink(videos / name, tmp_path / "c" / name)
    return tmp_path


def shown(clip):
    t, h, w, _ = clip.shape
    xs = [(b * 8 + 4) * w // 64 for b in range(8)]
    bits = clip[:, h // 2, xs, 1] > 128
    return [int(sum(1 << b for b in range(8) if bits[k, b])) for k in range(t)]


@pytest.mark.parametrize("name", sorted(CUTS))
def test_cut_streams_count_the_frames_from_the_first_keyframe(ferry, tmp_path, videos, name):
    first = CUTS[name]
    root = root_of(tmp_path, videos, name)
    ds = ferry.VideoFolder(root, frames=1, size=(48, 64), index_files=False)
    n = ds.frame_count(0)
    assert n == 60 - first
    whole = ferry.VideoFolder(root, frames=n, size=(48, 64), start="start", index_files=False)
    assert shown(whole[0]["video"]) == list(range(first, 60))
    # clips that seek (or decode from the start) agree with the whole decode
    clips = ferry.VideoFolder(root, frames=3, stride=2, size=(48, 64), clips_per_video=12,
                              index_files=False)
    for b in ferry.Loader(clips, batch_size=4, device="cpu", seed=3):
        v = np.from_dlpack(b["video"])
        for i in range(len(v)):
            got = shown(v[i])
            assert got[1] - got[0] == 2 and got[2] - got[1] == 2, (name, got)
            assert first <= got[0] and got[2] <= 59, (name, got)


def test_a_container_damaged_in_the_middle_is_a_data_error(ferry, tmp_path, videos):
    root = root_of(tmp_path, videos, "corrupt_ffv1.mkv")
    ds = ferry.VideoFolder(root, frames=2, size=8, start="start", index_files=False)
    with pytest.raises(ferry.DataError, match="corrupt_ffv1.mkv: damaged"):
        ds.frame_count(0)
    with pytest.raises(ferry.DataError, match="corrupt_ffv1.mkv"):
        ds[0]


def test_argument_errors_name_the_argument(ferry, tmp_path, videos):
    root = root_of(tmp_path, videos, "ffv1.mkv")
    ds = ferry.VideoFolder(root, frames=2, size=8, index_files=False)
    for bad in (-1, 1, 2**64):
        with pytest.raises(IndexError, match="video"):
            ds.frame_count(bad)
    for bad in ("0", 1.5, True, None):
        with pytest.raises(TypeError, match="video"):
            ds.frame_count(bad)
    with pytest.raises(IndexError, match="index"):
        ds.clip_frames(5, 0)
    with pytest.raises(TypeError, match="index"):
        ds.clip_frames("0", 0)
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="seed"):
            ds.clip_frames(0, bad)
    with pytest.raises(TypeError, match="seed"):
        ds.clip_frames(0, 1.5)
    assert ds.clip_frames(0, 2**64 - 1) == ds.clip_frames(0, np.uint64(2**64 - 1))
    for key in ("frames", "stride", "clips_per_video", "decode_threads"):
        with pytest.raises(TypeError, match=key):
            ferry.VideoFolder(root, **{key: True})
        with pytest.raises(TypeError, match=key):
            ferry.VideoFolder(root, **{key: 2.0})
    with pytest.raises(ValueError, match="frames"):
        ferry.VideoFolder(root, frames=2**40)
    with pytest.raises(TypeError, match="1"):
        ferry.WebDataset([str(root / "c" / "ffv1.mkv")], video={1: 2})
