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

