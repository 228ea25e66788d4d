"""The anchors of bench/video_compare: random 16-frame clips of videos, read by a torch Dataset
in DataLoader, as a user writes it. Run with Debian's /usr/bin/python3 (torch, torchvision,
python3-av).

  video_side.py pyav|torchvision --dir DIR --clips N [--workers 2] [--batch 8] [--seed 1]
                [--frames 16] [--size 112] [--clip-list FILE]

pyav: __getitem__ opens the file with PyAV, seeks (backward, to the keyframe at or before the
clip's first frame: container.seek with the frame's timestamp), decodes forward, skips the
frames before the clip and converts each of its frames with frame.to_ndarray(width, height,
format="rgb24") (libswscale inside PyAV), stopping after the last: the best a user writes.
torchvision: torchvision.io.read_video(path, start_pts, end_pts, pts_unit="sec") of the clip's
time span, its first T frames resized to size x size with torch's bilinear interpolate.

Clips are those of --clip-list ("<path>\t<first frame>" a line, as `bench/video clips` writes
the clips ferry's side decodes), or else drawn as bench/video draws them: a video uniform among the files, its first frame
uniform in [0, frames - T]; frame k is at time k / fps (the videos have a constant rate).
The file list and the frame counts (from the container's header) are read once in __init__.
DataLoader(num_workers, batch_size, persistent_workers=False), one pass over N clips. One JSON
line on stdout: {"clips": N, "seconds": S, "clips_per_s": R}.
"""

import argparse
import json
import os
import random
import time
from fractions import Fraction

import av
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def list_videos(root):
    paths = []
    for folder, _, files in os.walk(root):
        paths += [os.path.join(folder, f) for f in files if f.endswith((".mp4", ".mkv"))]
    return sorted(paths)


class Clips(Dataset):
    def __init__(self, root, clips, frames, size, seed, mode, clip_list=None):
        self.paths = list_videos(root)
        self.frames, self.size, self.mode = frames, size, mode
        self.info = []
        for p in self.paths:
            with av.open(p) as c:
                s = c.streams.video[0]
                self.info.append((s.frames, Fraction(s.average_rate)))
        self.clips = []
        if clip_list:
            where = {os.path.realpath(p): v for v, p in enumerate(self.paths)}
            with open(clip_list) as f:
                for line in f.read().splitlines()[:clips]:
                    path, first = line.split("\t")
                    self.clips.append((where[os.path.realpath(path)], int(first)))
            return
        rng = random.Random(seed)
        for _ in range(clips):
            v = rng.randrange(len(self.paths))
            self.clips.append((v, rng.randint(0, self.info[v][0] - frames)))

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        v, first = self.clips[i]
        if self.mode == "pyav":
            return self.pyav(v, first)
        return self.torchvision(v, first)

    def pyav(self, v, first):
        fps = self.info[v][1]
        out = np.empty((self.frames, self.size, self.size, 3), np.uint8)
        with av.open(self.paths[v]) as c:
            stream = c.streams.video[0]
            tb = stream.time_base
            first_pts = int(Fraction(first) / fps / tb)
            c.seek(first_pts, stream=stream, backward=True, any_frame=False)
            got = 0
            for frame in c.decode(stream):
                if frame.pts < first_pts:
                    continue
                out[got] = frame.to_ndarray(width=self.size, height=self.size, format="rgb24")
                got += 1
                if got == self.frames:
                    break
        return torch.from_numpy(out)

    def torchvision(self, v, first):
        import torchvision.io

        fps = self.info[v][1]
        start = float(Fraction(first) / fps)
        end = float(Fraction(first + self.frames - 1) / fps)
        video, _, _ = torchvision.io.read_video(self.paths[v], start_pts=start, end_pts=end,
                                                pts_unit="sec", output_format="TCHW")
        video = video[: self.frames].float()
        video = F.interpolate(video, size=(self.size, self.size), mode="bilinear",
                              align_corners=False)
        return video.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["pyav", "torchvision"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--clips", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--clip-list")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = Clips(a.dir, a.clips, a.frames, a.size, a.seed, a.mode, a.clip_list)
    loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers, shuffle=False)
    start = time.perf_counter()
    clips = 0
    check = 0
    for batch in loader:
        assert batch.shape[1:] == (a.frames, a.size, a.size, 3), batch.shape
        check += int(batch[0, 0, 0, 0, 0])
        clips += batch.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({"clips": clips, "seconds": round(seconds, 4),
                      "clips_per_s": round(clips / seconds, 3), "check": check}))


if __name__ == "__main__":
    main()
