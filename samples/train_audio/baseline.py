#!/usr/bin/python3
"""The PyTorch baseline of samples/train_audio: the same model, hyper-parameters and seeds,
trained on torchaudio's features of the same files.

    /usr/bin/python3 samples/train_audio/baseline.py --data DIR [--epochs N] [--seeds N] ...
    /usr/bin/python3 samples/train_audio/baseline.py --data DIR --compare build/.../train_audio

DIR is what make_digits.sh writes (DIR/train and DIR/test, class folders "0".."9"). Each file
becomes the features train_audio asks ferry for, here from torchaudio (Debian's 0.13, for
/usr/bin/python3): torchaudio.load, the channels averaged, torchaudio.functional.resample to
16 kHz, the first second (zero-padded at the end), MelSpectrogram(n_fft=400, hop_length=320,
n_mels=40, mel_scale="htk", center=True, power=2), then the log of max(power, 1e-10): f32
[51, 40]. Each mel band is standardized with the training set's mean and standard deviation.

The model is train_audio's (samples/common/mlp.hpp) in torch: softmax regression on the 2,040
standardized numbers of a clip (--hidden 0, the default), or one hidden layer of ReLU units
(--hidden N); He-normal weights and zero biases, Adam (lr 0.001) on the mean cross-entropy,
batches of 32 in an order shuffled each epoch, the last batch partial. Seeds 1..N, each the seed
of the weights and of the shuffle (torch's generators, not the C++ sample's: the same scheme,
not the same numbers). Prints each seed's held-out accuracy and, last, "test accuracy: X", the
mean over the seeds.

--compare PROGRAM runs train_audio on the same folder with the same flags, and exits 1 unless
its mean accuracy is within --max-diff (default 0.01: one point) of this one's and both are at
least --min-accuracy.
"""

import argparse
import pathlib
import re
import subprocess
import sys
import time

import torch
import torchaudio

RATE, CLIP_SECONDS, N_FFT, HOP, N_MELS, LOG_FLOOR = 16000, 1.0, 400, 320, 40, 1e-10
EXTENSIONS = {".wav", ".flac", ".ogg", ".opus", ".mp3"}


def features(root):
    """[n, frames, n_mels] log-mel features and [n] labels of an AudioFolder layout, classes
    sorted by name as ferry's AudioFolder sorts them."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    mel = torchaudio.transforms.MelSpectrogram(sample_rate=RATE, n_fft=N_FFT, hop_length=HOP,
                                               n_mels=N_MELS, mel_scale="htk", center=True,
                                               power=2.0)
    clip = round(CLIP_SECONDS * RATE)
    xs, ys = [], []
    for label, name in enumerate(classes):
        for path in sorted((root / name).iterdir()):
            if path.suffix.lower() not in EXTENSIONS:
                continue
            wave, rate = torchaudio.load(str(path))
            wave = wave.mean(dim=0)
            if rate != RATE:
                wave = torchaudio.functional.resample(wave, rate, RATE)
            wave = torch.nn.functional.pad(wave[:clip], (0, max(0, clip - wave.shape[0])))
            xs.append(torch.log(torch.clamp(mel(wave), min=LOG_FLOOR)).T)
            ys.append(label)
    return torch.stack(xs), torch.tensor(ys), classes


def train_one(seed, x_train, y_train, x_test, y_test, args):
    torch.manual_seed(seed)
    inputs = x_train.shape[1]
    if args.hidden == 0:
        model = torch.nn.Sequential(torch.nn.Linear(inputs, 10))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(inputs, args.hidden), torch.nn.ReLU(),
                                    torch.nn.Linear(args.hidden, 10))
    for layer in model[::2]:
        torch.nn.init.normal_(layer.weight, 0.0, (2.0 / layer.in_features) ** 0.5)
        torch.nn.init.zeros_(layer.bias)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    shuffle = torch.Generator().manual_seed(seed)
    for _ in range(args.epochs):
        order = torch.randperm(x_train.shape[0], generator=shuffle)
        for start in range(0, len(order), args.batch):
            rows = order[start:start + args.batch]
            loss = torch.nn.functional.cross_entropy(model(x_train[rows]), y_train[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        return (model(x_test).argmax(dim=1) == y_test).float().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=pathlib.Path)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--compare", help="train_audio, run with the same flags")
    parser.add_argument("--max-diff", type=float, default=0.01)
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="with --compare: both accuracies at least this")
    args = parser.parse_args()
    torch.set_num_threads(1)  # small matrices: one thread is as fast, and leaves the cores alone

    start = time.perf_counter()
    x_train, y_train, classes = features(args.data / "train")
    x_test, y_test, test_classes = features(args.data / "test")
    if classes != test_classes:
        sys.exit(f"baseline: train classes {classes} and test classes {test_classes} differ")
    seconds = time.perf_counter() - start
    print(f"torchaudio {torchaudio.__version__}: {len(y_train)} training and {len(y_test)} test "
          f"clips, features {list(x_train.shape[1:])} in {seconds:.1f} s")
    # Per mel band, over the training set's clips and frames.
    mean = x_train.mean(dim=(0, 1))
    std = x_train.std(dim=(0, 1), unbiased=False)
    x_train = ((x_train - mean) / std).flatten(1)
    x_test = ((x_test - mean) / std).flatten(1)

    accuracies = []
    for seed in range(1, args.seeds + 1):
        accuracies.append(train_one(seed, x_train, y_train, x_test, y_test, args))
        print(f"seed {seed}: held-out accuracy {accuracies[-1]:.4f}")
    accuracy = sum(accuracies) / len(accuracies)
    print(f"test accuracy: {accuracy:.4f} (mean of {len(accuracies)} seeds)")
    sys.stdout.flush()
    if args.compare is None:
        return 0

    command = [args.compare, "--data", str(args.data), "--epochs", str(args.epochs), "--batch",
               str(args.batch), "--hidden", str(args.hidden), "--lr", str(args.lr), "--seeds",
               str(args.seeds)]
    run = subprocess.run(command, capture_output=True, text=True)
    print(run.stdout, end="")
    if run.returncode != 0:
        sys.exit(f"baseline: {' '.join(command)} exited with {run.returncode}:\n{run.stderr}")
    found = re.findall(r"test accuracy: ([0-9.]+)", run.stdout)
    if not found:
        sys.exit("baseline: train_audio printed no test accuracy")
    ferry = float(found[-1])
    diff = abs(ferry - accuracy)
    passed = diff <= args.max_diff and min(ferry, accuracy) >= args.min_accuracy
    print(f"ferry {ferry:.4f}, torchaudio {accuracy:.4f}: {100 * diff:.2f} points apart "
          f"(at most {100 * args.max_diff:.2f}), both at least {args.min_accuracy:.4f}: "
          f"{'ok' if passed else 'FAILED'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
