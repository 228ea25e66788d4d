# ferry.AudioFolder from Python: values against soundfile (an independent reader of the same
# files), batches to torch through DLPack, the log-mel spectrogram against torchaudio's
# MelSpectrogram, and the keywords' errors. Fixtures are made by sox (skipped without it).
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


@pytest.fixture
def folder(tmp_path):
    sox(tmp_path, "cat/a.wav", "-r 16000 -c 1 -b 16", "synth 0.30 sine 440 vol 0.5")
    sox(tmp_path, "cat/b.flac", "-r 16000 -c 2 -b 16", "synth 0.20 sine 300 sine 900 vol 0.4")
    sox(tmp_path, "dog/c.wav", "-r 16000 -c 1 -b 16", "synth 0.45 pinknoise vol 0.3")
    return tmp_path


def test_whole_files_are_soundfiles_values_in_padded_batches(ferry, folder):
    sf = pytest.importorskip("soundfile")
    ds = ferry.AudioFolder(folder, sample_rate=0)
    assert ds.classes == ["cat", "dog"]
    assert ds.sample_rate == 16000 and ds.channels == 1
    assert ds.fields[0] == ("audio", "f32", (None,))
    loader = ferry.Loader(ds, batch_size=3, device="cpu", ragged="pad")
    (batch,) = list(loader.epoch(0))
    audio = batch["audio"].numpy()
    lengths = batch.lengths("audio").numpy()
    assert audio.shape == (3, 7200)
    for i in range(3):
        want, rate = sf.read(ds.path(i), dtype="float32", always_2d=True)
        assert rate == 16000
        want = want.mean(axis=1, dtype=np.float32) if want.shape[1] > 1 else want[:, 0]
        assert lengths[i] == len(want) == ds.length(i, "audio")
        np.testing.assert_allclose(audio[i, : len(want)], want, rtol=0, atol=1e-7)
        assert not audio[i, len(want):].any()
    np.testing.assert_array_equal(batch["label"].numpy(), [0, 0, 1])


def test_clips_reach_torch_through_dlpack(ferry, folder):
    torch = pytest.importorskip("torch")
    ds = ferry.AudioFolder(folder, channels=2, clip_seconds=0.25, crop="center")
    assert ds.fields[0] == ("audio", "f32", (4000, 2))
    loader = ferry.Loader(ds, batch_size=3, device="cpu")
    (batch,) = list(loader.epoch(0))
    x = torch.from_dlpack(batch["audio"])
    assert x.shape == (3, 4000, 2) and x.dtype == torch.float32
    # a.wav is 0.3 s (4800 frames): the center clip starts at 400, both channels the mono one.
    whole = ferry.Loader(ferry.AudioFolder(folder, channels=2), batch_size=1, device="cpu")
    first = next(iter(whole.epoch(0)))["audio"].numpy()[0]
    np.testing.assert_array_equal(x[0].numpy(), first[400:4400])
    assert torch.equal(x[0, :, 0], x[0, :, 1])
    # b.flac is 0.2 s: the clip is the file, then zeros.
    assert not x[1, 3200:].any() and x[1, :3200].abs().max() > 0.1


def test_log_mel_matches_torchaudio(ferry, folder):
    torch = pytest.importorskip("torch")
    torchaudio = pytest.importorskip("torchaudio")
    sf = pytest.importorskip("soundfile")
    mel = dict(n_fft=400, hop=160, n_mels=80)
    ds = ferry.AudioFolder(folder, mel=mel)
    assert ds.fields[0] == ("audio", "f32", (None, 80))
    transform = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_fft=400, hop_length=160,
                                                     n_mels=80)
    loader = ferry.Loader(ds, batch_size=1, device="cpu", ragged="pack")
    for i, batch in enumerate(loader.epoch(0)):
        got = batch["audio"].numpy()
        wave, _ = sf.read(ds.path(i), dtype="float32", always_2d=True)
        wave = torch.from_numpy(wave.mean(axis=1, dtype=np.float32))
        want = torch.log(torch.clamp(transform(wave), min=1e-10)).T.numpy()
        assert got.shape == want.shape == (1 + len(wave) // 160, 80)
        # Float32 FFTs of two libraries: log powers agree to 1e-4 (3e-5 here) where the power is
        # above 1e-6 of the frame's peak; the powers themselves agree to 1e-5 of the peak.
        loud = want > want.max(axis=1, keepdims=True) - np.log(1e6)
        assert np.abs(got - want)[loud].max() < 1e-4
        peak = np.exp(want.max(axis=1, keepdims=True))
        assert (np.abs(np.exp(got) - np.exp(want)) / peak).max() < 1e-5


def test_keywords_and_bad_files(ferry, folder):
    with pytest.raises(ferry.ConfigError, match='crop is "random", "start" or "center"'):
        ferry.AudioFolder(folder, crop="middle")
    with pytest.raises(TypeError, match="hop_size"):
        ferry.AudioFolder(folder, mel=dict(hop_size=100))
    with pytest.raises(ferry.ConfigError, match="mel needs channels 1"):
        ferry.AudioFolder(folder, channels=2, mel=True)
    (folder / "zzz").mkdir()
    with pytest.raises(ferry.DataError, match="no sound files"):
        ferry.AudioFolder(folder / "zzz")
    (folder / "dog" / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt junk")
    ds = ferry.AudioFolder(folder, clip_seconds=0.1)  # the bad file is not read here
    loader = ferry.Loader(ds, batch_size=4, device="cpu")
    with pytest.raises(ferry.DataError, match="broken.wav"):
        list(loader.epoch(0))
    skip = ferry.Loader(ds, batch_size=4, device="cpu", on_error="skip")
    (batch,) = list(skip.epoch(0))
    assert list(batch.indices) == [0, 1, 3]
    # ds[i] names the sample too, where the header's check (a whole file's length) refuses it
    whole = ferry.AudioFolder(folder)
    with pytest.raises(ferry.DataError, match="sample 2: .*broken.wav"):
        whole[2]


def test_webdataset_and_table_audio_decode_as_audiofolder(ferry, folder):
    import os
    import tarfile

    # The shard holds AudioFolder's files (cat/a.wav, cat/b.flac, dog/c.wav) as keys a, b, c.
    ds = ferry.AudioFolder(folder, clip_seconds=0.1)
    shard = folder / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i, key in enumerate("abc"):
            tar.add(ds.path(i), arcname=f"{key}.wav")
    # b.flac went in as b.wav: libsndfile goes by the bytes, not the name.
    shards = ferry.WebDataset(shard, index_files=False, audio=dict(clip_seconds=0.1))
    assert shards.fields == [("wav", "f32", (1600,))]
    batches = []
    for d, field in ((ds, "audio"), (shards, "wav")):
        loader = ferry.Loader(d, batch_size=3, device="cpu", shuffle=True, seed=4)
        batches.append(next(iter(loader.epoch(1)))[field].numpy().copy())
    np.testing.assert_array_equal(batches[0], batches[1])
    with pytest.raises(TypeError, match="rate"):
        ferry.WebDataset(shard, audio=dict(rate=8000))
    # Parquet and Arrow tables of HF Audio structs, when tests/table's writers are installed.
    writer = os.path.join(os.path.dirname(__file__), "..", "table")
    if not os.path.isdir(os.path.join(writer, "node_modules", "parquet-wasm")) or \
            shutil.which("node") is None:
        pytest.skip("tests/table's node writers are not installed")
    flat = folder / "flat"
    flat.mkdir()
    for i in range(3):
        shutil.copy(ds.path(i), flat / os.path.basename(ds.path(i)))
    subprocess.run(["node", os.path.join(writer, "write_audio.js"), str(folder / "t"), str(flat)],
                   check=True, stdout=subprocess.DEVNULL)
    for cls, name in ((ferry.ParquetDataset, "audio.parquet"), (ferry.ArrowDataset, "audio.arrow")):
        table = cls(folder / "t" / name, columns=["audio"], audio=["audio"],
                    audio_options=dict(clip_seconds=0.1))
        loader = ferry.Loader(table, batch_size=3, device="cpu", shuffle=True, seed=4)
        np.testing.assert_array_equal(next(iter(loader.epoch(1)))["audio"].numpy(), batches[0])


def test_a_rate_more_than_256_times_from_sample_rate_is_refused_by_its_header(ferry, tmp_path):
    # A 1 Hz file read at 4 MHz once crashed libsoxr (and 2 MHz spun in it): refused, before any
    # decode, as a DataError naming the file; a file 256 times from the rate asked is read.
    import wave

    (tmp_path / "c").mkdir()
    for name, rate in (("one_hertz.wav", 1), ("near.wav", 63)):
        with wave.open(str(tmp_path / "c" / name), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(np.arange(3000, dtype=np.int16).tobytes())
    ds = ferry.AudioFolder(tmp_path, sample_rate=16000, clip_seconds=0.05, crop="start")
    skip = ferry.Loader(ds, batch_size=2, device="cpu", on_error="skip")
    (batch,) = list(skip.epoch(0))
    assert list(batch.indices) == [0]  # near.wav (63 Hz: 254 times); one_hertz.wav skipped
    reasons = skip.stats().skip_reasons
    assert len(reasons) == 1 and "one_hertz.wav" in reasons[0] and "256 times" in reasons[0]


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg program")
@pytest.mark.parametrize("channels", [3, 4, 5, 6, 7, 8])
def test_ogg_channels_come_in_waves_order(ferry, tmp_path, channels):
    # The same layout written as WAV, Ogg Vorbis and Opus: the Ogg files store Vorbis's order
    # (5.1: FL, FC, FR, BL, BR, LFE), which libsndfile passes on; ferry gives WAVE's (5.1: FL,
    # FR, FC, LFE, BL, BR), as ffmpeg's own decode does, so that channels=2 is the front pair
    # whatever the container.
    layout = {3: "3.0", 4: "quad", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}[channels]
    rate = 48000
    hz = [300 + 200 * c for c in range(channels)]  # WAVE channel c: hz[c]
    t = np.arange(rate) / rate
    raw = np.stack([0.3 * np.sin(2 * np.pi * f * t) for f in hz], 1).astype("<f4")
    (tmp_path / "c").mkdir()

    def dominant(a):
        f = np.fft.rfftfreq(len(a), 1 / rate)
        return [int(round(f[np.abs(np.fft.rfft(a[:, c])).argmax()])) for c in range(a.shape[1])]

    decoded = {}  # ffmpeg's decode of each file, in WAVE's order
    for ext, codec in (("wav", "pcm_s16le"), ("ogg", "libvorbis"), ("opus", "libopus")):
        path = tmp_path / "c" / f"x.{ext}"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "f32le", "-ar", str(rate), "-ac",
                        str(channels), "-channel_layout", layout, "-i", "-", "-c:a", codec,
                        str(path)], input=raw.tobytes(), check=True)
        out = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "f32le", "-"],
                             capture_output=True, check=True).stdout
        decoded[ext] = dominant(np.frombuffer(out, "<f4").reshape(-1, channels))
    assert decoded["wav"] == hz and decoded["ogg"][:3] == hz[:3]
    lfe = 3 if channels in (6, 7, 8) else None  # low-passed by an encoder: its peak moves
    for keep in (0, 2):
        ds = ferry.AudioFolder(tmp_path, channels=keep, sample_rate=rate)
        got = {str(ds.path(i)).rsplit(".", 1)[1]: dominant(ds[i]["audio"]) for i in range(3)}
        for ext in ("wav", "ogg", "opus"):
            want = decoded[ext] if keep == 0 else decoded[ext][:2]
            assert [g for k, g in enumerate(got[ext]) if k != lfe] == \
                [w for k, w in enumerate(want) if k != lfe], (ext, got, decoded)
