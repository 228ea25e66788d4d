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
