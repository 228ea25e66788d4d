"""The anchor of bench/audio_compare: sound files read by a torch Dataset in DataLoader, as a user
writes it with torchaudio. Run with Debian's /usr/bin/python3 (torch 1.13, torchaudio 0.13).

  audio_side.py --dir DIR --clips N [--clip-seconds S] [--workers 2] [--batch 8] [--seed 1]

__getitem__: torchaudio.load(path, frame_offset, num_frames) of the clip (with S 0 the whole
file), the channels averaged, torchaudio.functional.resample to 16 kHz, then
torchaudio.transforms.MelSpectrogram(16000, n_fft=400, hop_length=160, n_mels=80,
mel_scale="htk", center=True, power=2) and the log of max(power, 1e-10), as [frames, 80]: the
features bench/audio ferry asks AudioFolder for. Whole files are padded to the batch's longest
(pad_sequence), as ferry pads them.

Clips are drawn as bench/audio limit draws them: a file uniform among the files, its first
frame uniform in [0, frames - clip]. The file list and the lengths (torchaudio.info) are read
once in __init__, before the timer. DataLoader(num_workers, batch_size, persistent_workers=False),
one pass over N samples. One JSON line on stdout: {"samples": N, "seconds": S,
"samples_per_s": R}.
"""

import argparse
import json
import os
import random
import time

import torch
import torchaudio
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

RATE = 16000


def list_files(root):
    paths = []
    for folder, _, files in os.walk(root):
        paths += [os.path.join(folder, f) for f in files if f.endswith((".flac", ".wav"))]
    return sorted(paths)


class Clips(Dataset):
    def __init__(self, root, clips, clip_seconds, seed):
        self.paths = list_files(root)
        info = [torchaudio.info(p) for p in self.paths]
        rng = random.Random(seed)
        self.clips = []
        for _ in range(clips):
            f = rng.randrange(len(self.paths))
            frames = info[f].num_frames
            if clip_seconds <= 0:
                self.clips.append((f, 0, -1))
                continue
            n = min(frames, round(clip_seconds * info[f].sample_rate))
            self.clips.append((f, rng.randint(0, frames - n), n))
        self.mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=RATE, n_fft=400, hop_length=160, n_mels=80, mel_scale="htk", center=True,
            power=2.0)

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        f, first, frames = self.clips[i]
        wave, rate = torchaudio.load(self.paths[f], frame_offset=first, num_frames=frames)
        wave = torchaudio.functional.resample(wave.mean(dim=0), rate, RATE)
        return torch.log(torch.clamp(self.mel(wave), min=1e-10)).T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--clips", type=int, default=100)
    ap.add_argument("--clip-seconds", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = Clips(a.dir, a.clips, a.clip_seconds, a.seed)
    loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers, shuffle=False,
                        collate_fn=lambda xs: pad_sequence(xs, batch_first=True))
    start = time.perf_counter()
    samples = 0
    check = 0.0
    for batch in loader:
        assert batch.shape[2] == 80, batch.shape
        check += float(batch[0, 0, 0])
        samples += batch.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({"samples": samples, "seconds": round(seconds, 4),
                      "samples_per_s": round(samples / seconds, 3), "check": check}))


if __name__ == "__main__":
    main()
