#!/usr/bin/python3
"""The audio baseline presto is measured against: torchaudio in a DataLoader.

    torchaudio_baseline.py DATA_DIR [--epochs 2] [--batch-size 64] [--workers 2]
                           [--rate 16000] [--length 16000] [--n-mels 64]

DATA_DIR is a CLASS/ tree of .wav .flac .ogg .mp3 clips (tests/tools/mkaudio.py),
listed as presto lists it (classes sorted, files sorted, those extensions in any
case). Each sample is what prestod's audio bench pipeline makes:
torchaudio.load(path).mean(0, keepdim=True) (mono), torchaudio.functional.resample
to --rate, cropped or zero-padded at the end to --length samples, then
torchaudio.transforms.MelSpectrogram(rate, n_mels) (n_fft 400, hop 200, power 2):
a float32 [1, n_mels, frames] tensor and an int64 label. Every epoch is timed from
creating its iterator (worker start-up included, persistent_workers=False) to the
last batch, and each batch is touched (torch_baseline.py's timing). Prints one JSON
line, in torch_baseline.py's form.
"""

import argparse
import json
import os
import sys

import torch
import torchaudio
import torchaudio.functional as AF
import torchaudio.transforms as AT
from torch.utils.data import DataLoader, Dataset

from torch_baseline import timed_epochs

EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3")


def list_clips(root):
    """(path, label) in presto's order: classes sorted, then file names sorted."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    clips = []
    for label, c in enumerate(classes):
        names = sorted(e.name for e in os.scandir(os.path.join(root, c))
                       if e.is_file() and e.name.lower().endswith(EXTENSIONS))
        clips += [(os.path.join(root, c, n), label) for n in names]
    return clips, classes


class Clips(Dataset):
    def __init__(self, root, rate, length, n_mels):
        self.clips, self.classes = list_clips(root)
        self.rate, self.length = rate, length
        self.mel = AT.MelSpectrogram(rate, n_mels=n_mels)

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        path, label = self.clips[i]
        x, sr = torchaudio.load(path)
        x = AF.resample(x.mean(0, keepdim=True), sr, self.rate)
        n = x.shape[1]
        if n >= self.length:
            x = x[:, :self.length]
        else:
            x = torch.nn.functional.pad(x, (0, self.length - n))
        return self.mel(x), label


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="CLASS/ tree of audio clips")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rate", type=int, default=16000)
    p.add_argument("--length", type=int, default=16000)
    p.add_argument("--n-mels", type=int, default=64)
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.workers < 0 or a.length < 1:
        p.error("--epochs, --batch-size and --length must be >= 1, --workers >= 0")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(1)
    ds = Clips(a.data, a.rate, a.length, a.n_mels)
    if not len(ds):
        sys.exit("torchaudio_baseline: no clips under %s" % a.data)
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers,
                        persistent_workers=False)
    epochs = timed_epochs(loader, a.epochs)
    print(json.dumps({"baseline": "torchaudio", "epochs": epochs,
                      "samples_per_s": max(e["samples_per_s"] for e in epochs),
                      "num_workers": a.workers, "batch_size": a.batch_size,
                      "torch": torch.__version__, "torchaudio": torchaudio.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
