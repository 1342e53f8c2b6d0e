"""mixup and cutmix as torchvision's reference training scripts apply them.

torchvision 0.14 does not ship them: references/classification/transforms.py
(RandomMixup, RandomCutmix) and train.py (a RandomChoice between the two in
the DataLoader's collate_fn, each with p=1.0) do. This module follows that
code's algorithm step for step, in float32 on the collated batch:

    mixup   lambda = Dirichlet([alpha, alpha])[0]; pairs each sample with the
            previous one (batch.roll(1, 0)); x * lambda + rolled * (1 - lambda),
            the one-hot targets likewise
    cutmix  lambda as above; a centre uniform over the pixels, half sides
            int(0.5 sqrt(1 - lambda) * W) and * H, the box clipped; the box
            copied from the rolled batch; lambda = 1 - box area / image area;
            targets mixed with it

Used by tests/python/test_augment.py (with the decision given, to compare
presto's mixing with it) and by `make bench`'s train-recipe baseline.
"""

import math
import random

import torch
from torch.utils.data import default_collate


def _one_hot(target, num_classes, dtype):
    if target.ndim == 1:
        return torch.nn.functional.one_hot(target, num_classes=num_classes).to(dtype=dtype)
    return target


class Mixup:
    """RandomMixup(num_classes, p, alpha). lam, when given, replaces the
    Dirichlet draw (the tests pass presto's decision)."""

    def __init__(self, num_classes, p=1.0, alpha=1.0):
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    def __call__(self, batch, target, lam=None):
        batch = batch.clone()
        target = _one_hot(target.clone(), self.num_classes, batch.dtype)
        if lam is None:
            if torch.rand(1).item() >= self.p:
                return batch, target
            lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        rolled, rolled_t = batch.roll(1, 0), target.roll(1, 0)
        rolled.mul_(1.0 - lam)
        batch.mul_(lam).add_(rolled)
        rolled_t.mul_(1.0 - lam)
        target.mul_(lam).add_(rolled_t)
        return batch, target


class Cutmix:
    """RandomCutmix(num_classes, p, alpha). box=(x1, y1, x2, y2), when given,
    replaces the draws."""

    def __init__(self, num_classes, p=1.0, alpha=1.0):
        self.num_classes, self.p, self.alpha = num_classes, p, alpha

    @staticmethod
    def box(lam, h, w, r_x, r_y):
        r = 0.5 * math.sqrt(1.0 - lam)
        rw, rh = int(r * w), int(r * h)
        return max(r_x - rw, 0), max(r_y - rh, 0), min(r_x + rw, w), min(r_y + rh, h)

    def __call__(self, batch, target, box=None):
        batch = batch.clone()
        target = _one_hot(target.clone(), self.num_classes, batch.dtype)
        h, w = batch.shape[-2], batch.shape[-1]
        if box is None:
            if torch.rand(1).item() >= self.p:
                return batch, target
            lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
            r_x = int(torch.randint(w, (1,)))
            r_y = int(torch.randint(h, (1,)))
            box = self.box(lam, h, w, r_x, r_y)
        x1, y1, x2, y2 = box
        rolled, rolled_t = batch.roll(1, 0), target.roll(1, 0)
        batch[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (w * h))
        rolled_t.mul_(1.0 - lam)
        target.mul_(lam).add_(rolled_t)
        return batch, target


class Collate:
    """train.py's collate_fn: default_collate, then one of the mixers (each
    with p=1.0) chosen uniformly, as torchvision.transforms.RandomChoice
    does (random.choices). A class, so DataLoader workers can pickle it."""

    def __init__(self, mixers):
        self.mixers = mixers

    def __call__(self, batch):
        mixer = random.choices(self.mixers)[0]
        return mixer(*default_collate(batch))


def collate_fn(num_classes, mixup_alpha, cutmix_alpha):
    """The reference scripts' collate function for these alphas (None when
    both are 0)."""
    mixers = []
    if mixup_alpha > 0.0:
        mixers.append(Mixup(num_classes, p=1.0, alpha=mixup_alpha))
    if cutmix_alpha > 0.0:
        mixers.append(Cutmix(num_classes, p=1.0, alpha=cutmix_alpha))
    return Collate(mixers) if mixers else None
