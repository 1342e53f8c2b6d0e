"""Training on presto's audio batches (issue 18): as good as torchaudio's.

Two data sets of spoken words from tests/tools/mkaudio.py (different seeds: other
voices, speeds, pitches and noise), one to train on and one held out. A tiny CNN
(two 1-D convolutions over time, a max over time, a linear layer) is trained for
a few epochs on the CPU twice from the same initial weights (torch.manual_seed), with the
same optimiser and batch size (a second each):

- on presto's batches: a real prestod serving the training clips through
  decode_audio {mono}, resample 16 kHz, time_crop 16000, mel_spectrogram 64,
  amplitude_to_db (offline, cached) and time_mask (online: new draws every
  epoch, as a trainer would use it), epochs shuffled by presto;
- on torchaudio's: a DataLoader over the same files doing the same (load, mean,
  resample, crop/pad, MelSpectrogram, AmplitudeToDB once per clip, then
  TimeMasking every epoch),
  shuffled by torch with the same seed.

Both models are scored on the held-out clips prepared by torchaudio (the same
tensors for both). The two accuracies must be well above chance (10 classes)
and within noise of each other: the runs differ in the order of the samples and
in the augmentations' draws, nothing else.
"""

import os
import shutil
import unittest

import numpy as np

import prestotest as pt
import presto

try:
    import torch
    import torch.nn as nn
    import torchaudio
    import torchaudio.functional as AF
    import torchaudio.transforms as AT
except ImportError:  # the whole module skips
    torchaudio = None

TRAIN, HELD_OUT = 300, 100
EPOCHS, BATCH, SEED = 5, 16, 3
RATE, LENGTH, MELS = 16000, 16000, 64
CHANCE = 0.1
MIN_ACCURACY = 0.8     # well above chance (10 classes)
NOISE = 0.1            # |presto - torchaudio| held-out accuracy

CONFIG = """\
datasets:
  - name: train
    root: {root}
    steps:
      - decode_audio: {{mono: true}}
      - resample: {{rate: 16000}}
      - time_crop: {{length: 16000}}
      - mel_spectrogram: {{n_mels: 64}}
      - amplitude_to_db: {{top_db: 80}}
      - time_mask: 10
"""

_dir = _train = _held = _daemon = None


def clips(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    return [(os.path.join(root, c, f), label) for label, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))]


class Words(torch.utils.data.Dataset if torchaudio else object):
    """torchaudio's side: the same pipeline as CONFIG (time_mask when augment),
    its deterministic part computed once per clip, as presto caches it."""

    def __init__(self, root, augment):
        self.items = clips(root)
        self.cache = {}
        self.mel = AT.MelSpectrogram(RATE, n_mels=MELS)
        self.db = AT.AmplitudeToDB(top_db=80)
        self.mask = AT.TimeMasking(10) if augment else None

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        if i not in self.cache:
            x, sr = torchaudio.load(path)
            x = AF.resample(x.mean(0, keepdim=True), sr, RATE)
            x = x[:, :LENGTH] if x.shape[1] >= LENGTH else \
                torch.nn.functional.pad(x, (0, LENGTH - x.shape[1]))
            self.cache[i] = self.db(self.mel(x))
        s = self.cache[i]
        if self.mask is not None:
            s = self.mask(s)
        return s, label


class Mels(nn.Module if torchaudio else object):
    """[N, 1, F, T] -> [N, F, T]: the mel bins as channels of a 1-D convolution."""

    def forward(self, x):
        return x.squeeze(1)


def model():
    """A keyword spotter's smallest form: convolutions over time with the mel bins
    as channels, then a max over time (where in the clip the word is does not
    matter)."""
    torch.manual_seed(SEED)
    return nn.Sequential(
        Mels(), nn.BatchNorm1d(MELS),
        nn.Conv1d(MELS, 64, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(64, 64, 5, padding=2), nn.ReLU(),
        nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(64, 10))


def train(batches_of_epoch):
    """Trains model() on batches_of_epoch(e) for EPOCHS epochs; returns it."""
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for e in range(EPOCHS):
        for x, y in batches_of_epoch(e):
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
    return net


def accuracy(net, x, y):
    net.eval()
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def setUpModule():
    global _dir, _train, _held, _daemon
    if torchaudio is None:
        raise unittest.SkipTest("torchaudio is not importable (install python3-torchaudio)")
    if os.environ.get("PRESTO_TRANSPORT") == "socket":
        raise unittest.SkipTest("does not depend on the transport: run once")
    for tool in ("espeak-ng", "flac", "lame", "oggenc"):
        if shutil.which(tool) is None:
            raise unittest.SkipTest("%s is missing (make deps installs it)" % tool)
    torch.set_num_threads(1)
    _dir = pt.tempdir()
    _train = pt.make_audio(os.path.join(_dir, "train"), TRAIN, seed=21)
    _held = pt.make_audio(os.path.join(_dir, "held"), HELD_OUT, seed=22)
    path = os.path.join(_dir, "prestod.yaml")
    with open(path, "w") as f:
        f.write(CONFIG.format(root='"%s"' % _train))
    _daemon = pt.Daemon(_dir, ["-c", path])


def tearDownModule():
    if _dir:
        pt.finish(_dir, _daemon)


class TrainTest(unittest.TestCase):
    def test_presto_trains_as_well_as_torchaudio(self):
        held = Words(_held, augment=False)
        hx = torch.stack([held[i][0] for i in range(len(held))])
        hy = torch.tensor([held[i][1] for i in range(len(held))])

        client = presto.Client(_daemon.sock)
        self.addCleanup(client.close)

        def presto_epoch(e):
            with client.stream("train", batch_size=BATCH, seed=SEED, epoch=e) as s:
                for b in s:
                    yield torch.from_numpy(np.array(b.images)), \
                        torch.from_numpy(np.array(b.labels))

        loader = torch.utils.data.DataLoader(
            Words(_train, augment=True), batch_size=BATCH, shuffle=True, num_workers=0,
            generator=torch.Generator().manual_seed(SEED))

        def torchaudio_epoch(e):
            torch.manual_seed(SEED * 1000 + e)  # TimeMasking's draws
            return iter(loader)

        acc_p = accuracy(train(presto_epoch), hx, hy)
        acc_t = accuracy(train(torchaudio_epoch), hx, hy)
        print("\nheld-out accuracy after %d epochs on %d clips: presto %.3f, torchaudio %.3f "
              "(chance %.1f)" % (EPOCHS, TRAIN, acc_p, acc_t, CHANCE))
        self.assertGreater(acc_p, MIN_ACCURACY)
        self.assertGreater(acc_t, MIN_ACCURACY)
        self.assertLessEqual(abs(acc_p - acc_t), NOISE)


if __name__ == "__main__":
    unittest.main()
