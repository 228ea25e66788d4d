# ferry.VideoFolder from Python: the keywords, exact frames (compared with PyAV's decode of the
# whole video, where python3-av is installed), clips_per_video, and errors. The fixtures are
# tests/video/make_fixtures.sh's (the ffmpeg program): frame n shows n in binary as 8 bars.
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "video" / "make_fixtures.sh"

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg program")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    out = tmp_path_factory.mktemp("video_fixtures")
    subprocess.run([str(SCRIPT), str(out)], check=True)
    return out


def folder(tmp_path, videos, layout):
    """tmp_path/<class>/<file>: links to the fixtures, as {class: [file, ...]}."""
    for cls, files in layout.items():
        (tmp_path / cls).mkdir()
        for f in files:
            os.symlink(videos / f, tmp_path / cls / f)
    return tmp_path


def clips(ferry, ds, **kw):
    """Every sample's (clip, label), in order."""
    out = []
    for b in ferry.Loader(ds, batch_size=2, device="cpu", **kw):
        v = np.from_dlpack(b["video"])
        y = np.from_dlpack(b["label"])
        out += [(v[i].copy(), int(y[i])) for i in range(len(y))]
    return out


def shown(clip):
    """The frame numbers a clip u8 [T, H, W, 3] shows: its 8 bars read at the middle row."""
    t, h, w, _ = clip.shape
    xs = [(b * 8 + 4) * w // 64 for b in range(8)]
    bits = clip[:, h // 2, xs, 1] > 128
    return [int(sum(1 << b for b in range(8) if bits[k, b])) for k in range(t)]


def test_keywords_and_fields(ferry, tmp_path, videos):
    root = folder(tmp_path, videos, {"a": ["bf.mp4"], "b": ["ffv1.mkv", "mpeg4.avi"]})
    ds = ferry.VideoFolder(root, frames=4, stride=2, size=(24, 32), start="center",
                           clips_per_video=2, index_files=False)
    assert len(ds) == 6 and ds.videos == 3
    assert ds.classes == ["a", "b"]
    assert [ds.frame_count(v) for v in range(3)] == [40, 30, 20]
    got = clips(ferry, ds)
    assert [label for _, label in got] == [0, 0, 1, 1, 1, 1]
    assert got[0][0].shape == (4, 24, 32, 3) and got[0][0].dtype == np.uint8
    # center: floor((N - 7) / 2), every other frame
    assert [shown(c) for c, _ in got] == [[16, 18, 20, 22]] * 2 + [[11, 13, 15, 17]] * 2 + \
        [[6, 8, 10, 12]] * 2
    square = ferry.VideoFolder(root, frames=1, size=8, start="uniform", index_files=False)
    assert clips(ferry, square)[0][0].shape == (1, 8, 8, 3)


def test_random_clips_are_the_same_whatever_the_workers(ferry, tmp_path, videos):
    root = folder(tmp_path, videos, {"a": ["long.mp4", "vp9.webm"], "b": ["vfr.mkv"]})
    ds = ferry.VideoFolder(root, frames=3, stride=3, size=16, clips_per_video=3, index_files=False)
    one = clips(ferry, ds, shuffle=True, seed=11, workers=1)
    two = clips(ferry, ds, shuffle=True, seed=11, workers=3)
    assert len(one) == 9
    for (a, la), (b, lb) in zip(one, two):
        np.testing.assert_array_equal(a, b)
        assert la == lb
    for c, _ in one:  # each a run of every third frame
        f = shown(c)
        assert f[1] - f[0] == 3 and f[2] - f[1] == 3, f


@pytest.mark.parametrize("name", ["bf.mp4", "long.mp4", "vfr.mkv", "vp9.webm", "ffv1.mkv",
                                  "trim.mp4"])
def test_frames_are_pyavs(ferry, tmp_path, videos, name):
    av = pytest.importorskip("av")
    with av.open(str(videos / name)) as container:
        frames = sorted(container.decode(video=0), key=lambda f: f.pts)
        native = [f.to_ndarray(format="rgb24") for f in frames]
        scaled = [f.reformat(width=40, height=30, format="rgb24",
                             interpolation="BILINEAR").to_ndarray() for f in frames]
    root = folder(tmp_path, videos, {"v": [name]})
    ds = ferry.VideoFolder(root, frames=7, size=(48, 64), start="uniform", index_files=False)
    n = ds.frame_count(0)
    assert n == len(frames)
    want = [(2 * k * (n - 1) + 6) // 12 for k in range(7)]
    clip = clips(ferry, ds)[0][0]
    first = shown(native[0][None])[0]  # trim.mp4's frame 0 shows 13 (bf.mp4's frame 13)
    assert shown(clip) == [first + k for k in want]
    for t, k in enumerate(want):
        diff = np.abs(clip[t].astype(int) - native[k].astype(int)).max()
        assert diff <= 1, (name, k, diff)
    ds = ferry.VideoFolder(root, frames=5, stride=2, size=(30, 40), start="start",
                           index_files=False)
    clip = clips(ferry, ds)[0][0]
    for t in range(5):
        diff = np.abs(clip[t].astype(int) - scaled[2 * t].astype(int)).max()
        assert diff <= 2, (name, 2 * t, diff)


def test_errors(ferry, tmp_path, videos):
    root = folder(tmp_path, videos, {"a": ["bf.mp4"]})
    (root / "a" / "junk.mkv").write_bytes(b"not a video" * 100)
    ds = ferry.VideoFolder(root, frames=2, size=8, index_files=False)  # open() does not raise
    with pytest.raises(ferry.DataError, match="junk.mkv"):
        clips(ferry, ds)
    with pytest.raises(ferry.DataError, match="junk.mkv"):
        ds.frame_count(1)
    with pytest.raises(ferry.ConfigError, match="start"):
        ferry.VideoFolder(root, start="middle")
    with pytest.raises(ferry.ConfigError, match="frames"):
        ferry.VideoFolder(root, frames=0)
    with pytest.raises(TypeError, match="size"):
        ferry.VideoFolder(root, size=(1, 2, 3))
    with pytest.raises(ferry.DataError, match="max_seconds"):
        ferry.VideoFolder(root, max_seconds=0.5, index_files=False).frame_count(0)


def test_webdataset_video_members(ferry, tmp_path, videos):
    import tarfile

    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for k, name in enumerate(["bf.mp4", "long.mp4"]):
            tar.add(videos / name, arcname=f"{k:03d}.mp4")
            info = tarfile.TarInfo(f"{k:03d}.cls")
            info.size = 1
            import io
            tar.addfile(info, io.BytesIO(str(k).encode()))
    ds = ferry.WebDataset(str(shard), video=dict(frames=3, stride=4, size=(24, 32), start="start"),
                          index_files=False)
    assert [name for name, _, _ in ds.fields] == ["cls", "mp4"]
    got = []
    for b in ferry.Loader(ds, batch_size=2, device="cpu"):
        got = np.from_dlpack(b["mp4"]).copy()
        assert list(np.from_dlpack(b["cls"])) == [0, 1]
    assert got.shape == (2, 3, 24, 32, 3)
    assert [shown(c) for c in got] == [[0, 4, 8], [0, 4, 8]]
    with pytest.raises(TypeError, match="clips_per_video"):
        ferry.WebDataset(str(shard), video=dict(clips_per_video=2))


@pytest.mark.parametrize("name", ["long.mp4", "long.mkv", "bf.mp4", "trim.mp4", "hevc.mp4"])
def test_clips_inside_a_gop_are_pyavs_frames(ferry, tmp_path, videos, name):
    # Clips starting deep in a GOP of B-frames: the frames shown before the clip that no other
    # frame refers to are not decoded (AVDISCARD_NONREF, H.264 and HEVC), and every frame of
    # the clip is still the full decode's, pixel for pixel.
    av = pytest.importorskip("av")
    if name == "hevc.mp4":
        codecs = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True,
                                text=True).stdout
        if "libx265" not in codecs:
            pytest.skip("no libx265 encoder")
        bars = ("format=yuv420p,geq=lum='if(bitand(N\\,pow(2\\,floor(X/8)))\\,235\\,16)'"
                ":cb=128:cr=128")
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-f",
                        "lavfi", "-i", "nullsrc=s=64x48:r=25," + bars, "-frames:v", "60",
                        "-c:v", "libx265", "-x265-params",
                        "log-level=error:keyint=60:min-keyint=60:bframes=4:b-adapt=0:"
                        "scenecut=0:lossless=1", str(tmp_path / "hevc.mp4")], check=True)
        (tmp_path / "v").mkdir()
        os.replace(tmp_path / "hevc.mp4", tmp_path / "v" / "hevc.mp4")
        root = tmp_path
    else:
        root = folder(tmp_path, videos, {"v": [name]})
    with av.open(str(root / "v" / name)) as container:
        frames = sorted(container.decode(video=0), key=lambda f: f.pts)
        native = [f.to_ndarray(format="rgb24") for f in frames]
    ds = ferry.VideoFolder(root, frames=6, stride=1, size=(48, 64), start="random",
                           clips_per_video=12, index_files=False)
    first = shown(native[0][None])[0]
    starts = set()
    for clip, _ in clips(ferry, ds, shuffle=True, seed=5):
        got = shown(clip)
        k0 = got[0] - first
        starts.add(k0)
        assert got == [got[0] + t for t in range(6)], got
        for t in range(6):
            diff = np.abs(clip[t].astype(int) - native[k0 + t].astype(int)).max()
            assert diff <= 1, (name, k0 + t, diff)
    assert max(starts) >= 5  # clips past the GOP's first frames
