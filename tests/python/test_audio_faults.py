# AudioFolder over damaged and unusual files: truncated files are a DataError for their sample
# whatever the clip, a ragged field's bad sample is skipped under on_error="skip", and files
# whose header gives no length are counted by decoding them. Fixtures are made by sox.
import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed")


def sox(folder, name, fmt, effects):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sox", "-R", "-D", "-n", *fmt.split(), str(path), *effects.split()], check=True)
    return path


def test_a_truncated_flac_is_a_data_error_whatever_the_clip(ferry, tmp_path):
    # 4 s of noise cut in half: a clip that falls in the half that survives is no less corrupt.
    whole = sox(tmp_path, "src/x.flac", "-r 16000 -c 1 -b 16", "synth 4 whitenoise vol 0.3")
    data = whole.read_bytes()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "trunc.flac").write_bytes(data[: len(data) // 2])
    shutil.copy(whole, tmp_path / "a" / "whole.flac")
    shutil.rmtree(tmp_path / "src")
    for crop in ("random", "start"):
        ds = ferry.AudioFolder(tmp_path, clip_seconds=0.5, crop=crop)
        loader = ferry.Loader(ds, batch_size=2, device="cpu", on_error="skip")
        for epoch in range(4):
            (batch,) = list(loader.epoch(epoch))
            assert list(batch.indices) == [1]  # whole.flac only
            assert batch["audio"].numpy().shape == (1, 8000)
        reasons = loader.stats().skip_reasons
        assert loader.stats().skipped == 4 and len(reasons) == 4
        assert all("trunc.flac" in r and "truncated or corrupt" in r for r in reasons)
        with pytest.raises(ferry.DataError, match="trunc.flac"):
            list(ferry.Loader(ds, batch_size=2, device="cpu").epoch(0))


def test_a_bad_whole_file_is_skipped_under_skip_not_raised_by_the_loader(ferry, tmp_path):
    # clip_seconds=0: the field is ragged and the loader asks every sample's length when it is
    # made and plans; a file whose header does not read is left out of its batch and counted.
    import io
    import tarfile
    import wave

    def wav(frames):
        out = io.BytesIO()
        with wave.open(out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.arange(frames, dtype=np.int16) * 3).tobytes())
        return out.getvalue()

    (tmp_path / "a").mkdir()
    for i in range(4):
        (tmp_path / "a" / f"{i}.wav").write_bytes(wav(160 * (i + 1)))
    (tmp_path / "a" / "2b.wav").write_bytes(b"not a wav file at all" * 10)
    ds = ferry.AudioFolder(tmp_path)  # 0.wav 1.wav 2.wav 2b.wav 3.wav
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(4):
            payload = wav(160 * (i + 1)) if i != 2 else b"junk" * 20
            info = tarfile.TarInfo(f"{i:03d}.wav")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    shards = ferry.WebDataset(shard, index_files=False, audio=dict())
    for data, field, bad, good in ((ds, "audio", 3, [0, 1, 2, 4]), (shards, "wav", 2, [0, 1, 3])):
        for kw in (dict(), dict(ragged="pack"), dict(max_tokens=700), dict(workers=3)):
            loader = ferry.Loader(data, batch_size=2, device="cpu", on_error="skip", **kw)
            got = {}
            for batch in loader.epoch(0):
                lengths = batch.lengths(field).numpy()
                values = batch[field].numpy()
                at = 0
                for k, i in enumerate(batch.indices):
                    rows = values[at: at + lengths[k]] if kw.get("ragged") else \
                        values[k, : lengths[k]]
                    at += lengths[k]
                    got[int(i)] = rows.copy()
            assert sorted(got) == good, kw
            for i in good:
                frames = 160 * ([0, 1, 2, 2, 3][i] + 1) if field == "audio" else \
                    160 * ([0, 1, 2, 3][i] + 1)
                want = (np.arange(frames) * 3).astype(np.float32) / 32768
                np.testing.assert_array_equal(got[i], want)
            assert loader.stats().skipped == 1
            (reason,) = loader.stats().skip_reasons
            assert ("2b.wav" if field == "audio" else "002.wav") in reason
        with pytest.raises(ferry.DataError, match="2b.wav" if field == "audio" else "002.wav"):
            list(ferry.Loader(data, batch_size=2, device="cpu").epoch(0))


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *map(str, args)], check=True)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed")
def test_mp3s_without_a_xing_header_are_counted_and_clips_are_the_whole_decodes(ferry, tmp_path):
    # Without a Xing/Info header mpg123 guesses an MP3's length from its first frame's bitrate:
    # a CBR file got frames too many (and was refused as truncated), a VBR one a fraction. A clip
    # is the whole decode's frames (an MP3 decoded from a few frames before the clip).
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 3) / 16000
    x = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(len(t))
    src = tmp_path / "x.wav"
    with __import__("wave").open(str(src), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((x * 32767).astype(np.int16).tobytes())
    for name, args in (("cbr", ["-b:a", "64k", "-write_xing", "0"]),
                       ("vbr", ["-q:a", "9", "-write_xing", "0"]),
                       ("xing", ["-b:a", "64k"])):
        (tmp_path / name / "a").mkdir(parents=True)
        ffmpeg("-i", src, "-c:a", "libmp3lame", *args, tmp_path / name / "a" / "x.mp3")
        ds = ferry.AudioFolder(tmp_path / name)  # 16 kHz: the files' own rate
        if name == "vbr":
            # libsndfile decodes no further than its guess: a clear DataError, not a fraction.
            with pytest.raises(ferry.DataError, match="x.mp3: an MP3 without a Xing"):
                ds.length(0, "audio")
            with pytest.raises(ferry.DataError, match="x.mp3: an MP3 without a Xing"):
                list(ferry.Loader(ferry.AudioFolder(tmp_path / name, clip_seconds=0.5),
                                  batch_size=1, device="cpu").epoch(0))
            continue
        (batch,) = list(ferry.Loader(ds, batch_size=1, device="cpu").epoch(0))
        whole = batch["audio"].numpy()[0]
        # 3 s, plus the encoder's delay and padding where no header says to trim them.
        assert ds.length(0, "audio") == len(whole), name
        assert 48000 <= len(whole) <= 48000 + 3 * 576, (name, len(whole))
        assert np.abs(whole).max() > 0.2, name
        for clip in (1.0, 0.5):
            cds = ferry.AudioFolder(tmp_path / name, clip_seconds=clip, crop="center")
            (batch,) = list(ferry.Loader(cds, batch_size=1, device="cpu").epoch(0))
            got = batch["audio"].numpy()[0]
            start = (len(whole) - len(got)) // 2
            np.testing.assert_allclose(got, whole[start: start + len(got)], rtol=0, atol=3e-7,
                                       err_msg=f"{name} clip {clip}")


def test_a_flac_whose_header_gives_no_length_is_counted_a_truncated_ogg_is_corrupt(ferry,
                                                                                 tmp_path):
    sf = pytest.importorskip("soundfile")
    src = sox(tmp_path, "src/x.flac", "-r 16000 -c 1 -b 16", "synth 1.25 sine 440 vol 0.5")
    data = bytearray(src.read_bytes())
    # STREAMINFO's total samples (36 bits from the low nibble of its 14th byte) 0: "unknown",
    # as a FLAC written to a pipe has it.
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0
    info = 8
    data[info + 13] &= 0xF0
    data[info + 14: info + 18] = b"\0\0\0\0"
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "piped.flac").write_bytes(bytes(data))
    want, _ = sf.read(src, dtype="float32")
    for clip in (0, 0.5):
        ds = ferry.AudioFolder(root, clip_seconds=clip, crop="start")
        (batch,) = list(ferry.Loader(ds, batch_size=1, device="cpu").epoch(0))
        got = batch["audio"].numpy()[0]
        assert len(got) == (20000 if clip == 0 else 8000)
        np.testing.assert_array_equal(got, want[: len(got)])
    assert ferry.AudioFolder(root).length(0, "audio") == 20000
    with pytest.raises(ferry.DataError, match="piped.flac: more than max_seconds"):
        ferry.AudioFolder(root, max_seconds=1).length(0, "audio")
    # An Ogg Vorbis file cut at a third: libsndfile finds no last page, so no length.
    ogg = sox(tmp_path, "src/x.ogg", "-r 8000 -c 1", "synth 3 whitenoise vol 0.3")
    data = ogg.read_bytes()
    (root / "a" / "piped.flac").unlink()
    (root / "a" / "t.ogg").write_bytes(data[: len(data) // 3])
    with pytest.raises(ferry.DataError, match="t.ogg: truncated or corrupt"):
        ferry.AudioFolder(root).length(0, "audio")
    with pytest.raises(ferry.DataError, match="t.ogg: truncated or corrupt"):
        list(ferry.Loader(ferry.AudioFolder(root, clip_seconds=0.5), batch_size=1,
                          device="cpu").epoch(0))


def test_samples_are_clipped_to_one_and_a_frame_resampled_down_is_still_a_frame(ferry, tmp_path):
    sf = pytest.importorskip("soundfile")
    (tmp_path / "a").mkdir()
    # A float WAV holding +-1000, and a full-scale square wave whose resampling overshoots 1.
    sf.write(tmp_path / "a" / "loud.wav", np.array([1000.0, -1000.0, 0.5] * 400, np.float32),
             16000, subtype="FLOAT")
    square = np.where(np.arange(4410) % 100 < 50, 1.0, -1.0).astype(np.float32)
    sf.write(tmp_path / "a" / "square.wav", square, 44100, subtype="PCM_16")
    for clip in (0, 0.05):
        ds = ferry.AudioFolder(tmp_path, clip_seconds=clip, crop="start")
        loader = ferry.Loader(ds, batch_size=1, device="cpu", ragged="pack")
        loud, sq = (b["audio"].numpy().reshape(-1) for b in loader.epoch(0))
        np.testing.assert_array_equal(loud[:6], [1, -1, 0.5, 1, -1, 0.5])
        assert sq.min() == -1 and sq.max() == 1
        assert np.abs(sq).max() <= 1 and np.abs(loud).max() <= 1
    # length() is round(frames * rate / file rate), at least 1: one frame at 48 kHz read at
    # 16 kHz is one frame (a file with none is refused), and it is delivered as such.
    shutil.rmtree(tmp_path / "a")
    (tmp_path / "b").mkdir()
    sf.write(tmp_path / "b" / "one.wav", np.full(1, 0.25, np.float32), 48000, subtype="FLOAT")
    sf.write(tmp_path / "b" / "two.wav", np.full(2, 0.25, np.float32), 48000, subtype="FLOAT")
    ds = ferry.AudioFolder(tmp_path)
    assert [ds.length(i, "audio") for i in range(2)] == [1, 1]
    (batch,) = list(ferry.Loader(ds, batch_size=2, device="cpu").epoch(0))
    assert list(batch.lengths("audio").numpy()) == [1, 1]


def test_channels_are_0_1_or_2_and_a_file_of_too_many_is_its_samples_data_error(ferry, tmp_path):
    sf = pytest.importorskip("soundfile")
    (tmp_path / "a").mkdir()
    sf.write(tmp_path / "a" / "y.wav", np.full((16, 2), 0.5, np.float32), 16000, subtype="PCM_16")
    for channels in (3, 1000):
        with pytest.raises(ferry.ConfigError, match=f"channels {channels} is not 0 .keep., 1"):
            ferry.AudioFolder(tmp_path, channels=channels)
    # channels=0 over a 257-channel first file: that file is no count to keep (its sample is a
    # DataError naming it); the next file's 2 channels are kept.
    sf.write(tmp_path / "a" / "x.wav", np.zeros((16, 257), np.float32), 16000, subtype="PCM_16")
    ds = ferry.AudioFolder(tmp_path, channels=0, clip_seconds=0.01)
    assert ds.channels == 2
    loader = ferry.Loader(ds, batch_size=2, device="cpu", on_error="skip")
    (batch,) = list(loader.epoch(0))
    assert list(batch.indices) == [1]
    np.testing.assert_array_equal(batch["audio"].numpy()[0, :16], np.full((16, 2), 0.5))
    (reason,) = loader.stats().skip_reasons
    assert "x.wav" in reason and "257 channels" in reason


def test_wrong_types_and_values_name_the_key_or_argument(ferry, tmp_path):
    sox(tmp_path, "a/x.wav", "-r 16000 -c 1 -b 16", "synth 0.1 sine 440")
    for mel, error, text in ((dict(n_fft="400"), TypeError, r"mel\['n_fft'\] must be an int"),
                             (dict(hop=1.5), TypeError, r"mel\['hop'\] must be an int"),
                             (dict(n_mels=None), TypeError, r"mel\['n_mels'\] must be an int"),
                             (dict(f_min="0"), TypeError, r"mel\['f_min'\] must be a number"),
                             (dict(log_floor=[1e-10]), TypeError, r"mel\['log_floor'\] must be"),
                             (dict(n_mels=2**40), ValueError, r"mel\['n_mels'\] 1099511627776 is out")):
        with pytest.raises(error, match=text):
            ferry.AudioFolder(tmp_path, mel=mel)
    with pytest.raises(TypeError, match=r"audio\['sample_rate'\] must be an int"):
        ferry.WebDataset([str(tmp_path / "none.tar")], audio=dict(sample_rate="16k"))
    with pytest.raises(TypeError, match=r"mel\['n_fft'\] must be an int"):
        ferry.WebDataset([str(tmp_path / "none.tar")], audio=dict(mel=dict(n_fft="x")))
    ds = ferry.AudioFolder(tmp_path)
    assert str(ds.path(0)).endswith("x.wav") and ds.label(0) == 0
    for call in (ds.path, ds.label):
        with pytest.raises(ValueError, match=r"index -1 is not 0 to 1 - 1"):
            call(-1)
        with pytest.raises(ValueError, match=r"index 1 is not 0 to 1 - 1"):
            call(1)
        with pytest.raises(TypeError, match=r"index must be an int, not '0'"):
            call("0")
    for clip in (1e15, 1e300):
        with pytest.raises(ferry.ConfigError, match=r"clip_seconds .* is out of range"):
            ferry.AudioFolder(tmp_path, clip_seconds=clip)


def test_numbers_are_not_bools_length_names_its_arguments_and_log_floor_is_finite(ferry, tmp_path):
    sox(tmp_path, "a/x.wav", "-r 16000 -c 1 -b 16", "synth 0.1 sine 440")
    for kw, name in ((dict(sample_rate=True), "sample_rate"), (dict(channels=False), "channels"),
                     (dict(clip_seconds=True), "clip_seconds"),
                     (dict(max_seconds=True), "max_seconds")):
        with pytest.raises(TypeError, match=rf"AudioFolder: {name} must be .*(True|False)"):
            ferry.AudioFolder(tmp_path, **kw)
    with pytest.raises(TypeError, match=r"AudioFolder: sample_rate must be an int, not '16k'"):
        ferry.AudioFolder(tmp_path, sample_rate="16k")
    assert ferry.AudioFolder(tmp_path, sample_rate=8000, clip_seconds=1).sample_rate == 8000
    for floor in (float("inf"), float("nan"), 1e300, 1e-300, -1.0, 0):
        with pytest.raises(ferry.ConfigError, match=r"mel.log_floor must be finite and > 0"):
            ferry.AudioFolder(tmp_path, mel=dict(log_floor=floor))
    ds = ferry.AudioFolder(tmp_path)
    assert ds.length(0, "audio") == 1600
    with pytest.raises(ValueError, match=r"AudioFolder.length: index -1 is not 0 to 1 - 1"):
        ds.length(-1, "audio")
    with pytest.raises(TypeError, match=r"AudioFolder.length: index must be an int"):
        ds.length(True, "audio")
    with pytest.raises(TypeError, match=r"AudioFolder.length: field must be a str"):
        ds.length(0, 0)
    with pytest.raises(ValueError, match=r"AudioFolder.length: no field 'wav'"):
        ds.length(0, "wav")
