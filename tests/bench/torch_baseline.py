#!/usr/bin/python3
"""The baseline presto is measured against: torchvision ImageFolder + DataLoader.

    torch_baseline.py DATA_DIR [--transforms eval|train|recipe] [--epochs 2]
                      [--batch-size 64] [--workers os.cpu_count()] [--mix MIXUP,CUTMIX]

--transforms eval (the default): the same work as prestod's default pipeline
(decode, Resize(256), CenterCrop(224), RandomHorizontalFlip) ending in uint8 tensors
(PILToTensor, no float conversion, so the comparison is fair).
--transforms train: torchvision's ImageNet training transforms, RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize (float32).
--transforms recipe: torchvision's reference recipe (references/classification:
RandomResizedCrop(224), RandomHorizontalFlip, TrivialAugmentWide (bilinear), PILToTensor,
ConvertImageDtype(float), Normalize, RandomErasing(0.1)); with --mix 0.2,1.0 the
collate function applies mixup (alpha 0.2) or cutmix (alpha 1.0) as the reference
train.py does (tests/tools/tvmix.py), labels becoming soft targets.
Every epoch is timed from creating its iterator (worker start-up included,
persistent_workers=False) to the last batch, and each batch is touched. Prints one
JSON line.
"""

import argparse
import json
import os
import sys
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TRANSFORMS = {
    "eval": lambda: transforms.Compose([
        transforms.Resize(256),
        transforms.CenterCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ]),
    "train": lambda: transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ]),
    # presets.ClassificationPresetTrain(auto_augment_policy="ta_wide",
    # random_erase_prob=0.1), as the reference scripts build it.
    "recipe": lambda: transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.TrivialAugmentWide(interpolation=transforms.InterpolationMode.BILINEAR),
        transforms.PILToTensor(),
        transforms.ConvertImageDtype(torch.float),
        transforms.Normalize(MEAN, STD),
        transforms.RandomErasing(p=0.1),
    ]),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", help="ImageFolder root (DIR/CLASS/*.jpg)")
    p.add_argument("--transforms", choices=sorted(TRANSFORMS), default="eval")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--mix", default=None, metavar="MIXUP,CUTMIX",
                   help="mixup and cutmix alphas in the collate function (0: off)")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.workers < 0:
        p.error("--epochs and --batch-size must be >= 1, --workers >= 0")
    return a


def run_epoch(loader):
    """One full pass; returns (seconds, samples)."""
    samples = 0
    touched = 0
    start = time.perf_counter()
    for images, labels in loader:
        # Touch the batch so that nothing is left lazily unread.
        touched += float(images[-1, 0, 0, 0]) + float(labels[-1].reshape(-1)[0])
        samples += images.shape[0]
    return time.perf_counter() - start, samples


def timed_epochs(loader, count):
    """count epochs of loader, each timed by run_epoch: a list of dicts."""
    epochs = []
    for _ in range(count):
        seconds, samples = run_epoch(loader)
        epochs.append({"seconds": round(seconds, 4), "samples": samples,
                       "samples_per_s": round(samples / seconds, 2)})
    return epochs


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(1)
    ds = datasets.ImageFolder(a.data, transform=TRANSFORMS[a.transforms]())
    collate = None
    if a.mix:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "tools"))
        import tvmix
        mixup, cutmix = (float(x) for x in a.mix.split(","))
        collate = tvmix.collate_fn(len(ds.classes), mixup, cutmix)
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True,
                        num_workers=a.workers, persistent_workers=False,
                        collate_fn=collate)
    epochs = timed_epochs(loader, a.epochs)
    print(json.dumps({
        "transforms": a.transforms,
        "epochs": epochs,
        "samples_per_s": max(e["samples_per_s"] for e in epochs),
        "num_workers": a.workers,
        "mix": a.mix,
        "batch_size": a.batch_size,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
