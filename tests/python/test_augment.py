"""Fidelity of the image steps (daemon/steps/) to torchvision 0.14 on PIL.

Each operation is applied through the test hook (build/testlib/libsteps_hook.so,
tests/tools/steps_hook.c, loaded with ctypes) with a given decision, and
compared with torchvision.transforms.functional on a PIL image of a real photo
with the same decision:

- exact (every byte) where torchvision runs Pillow's integer and single-
  precision code: every op of AutoAugment (ImageNet), RandAugment and
  TrivialAugmentWide at every magnitude bin of their spaces and both signs
  (nearest; the geometric ops also bilinear and with a fill), brightness,
  contrast, saturation and hue over a grid of factors, ColorJitter in the
  orders it draws, grayscale, rotate and affine at random angles, shifts,
  scales and shears; the magnitude tables themselves (float32 values of
  torch.linspace, as torch computes them on x86-64 with AVX2);
- within a stated tolerance where torchvision works in float: gaussian_blur
  (a float32 convolution summed in another order: values within 1, at most
  0.01% of them off by one; kernels within 1 unit in the last place);
- exact again on the float tensors: random_erasing's box with a value, mixup
  and cutmix with a given lambda and box against the reference scripts'
  algorithm (tests/tools/tvmix.py), soft targets included.

Then the decisions: presto's draws (splitmix64 from a seed, daemon/steps/
draw.h) against torchvision's own sampling over many draws with fixed seeds
(two-sample chi-square for categories, Kolmogorov-Smirnov for continuous
values; p > 0.001): the op, bin and sign frequencies of the three policies,
ColorJitter's order and factors, RandomAffine's parameters, RandomErasing's
boxes, and mixup/cutmix's kind, lambda and box (run through the reference
code on a tiny batch and read back from its output).

Run: tests/python/run.sh -k augment (figures print with -v).
"""

import collections
import ctypes
import functools
import math
import os
import random
import sys
import unittest
from unittest import mock

import numpy as np

import prestotest as pt

try:
    import torch
    from PIL import Image
    from torchvision import transforms as T
    from torchvision.transforms import autoaugment as AA
    from torchvision.transforms import functional as F
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional_tensor import _get_gaussian_kernel1d
except ImportError:  # the whole module skips
    torch = None

sys.path.insert(0, os.path.join(pt.SRC, "tests", "tools"))

HOOK = os.path.join(pt.BUILD, "testlib", "libsteps_hook.so")
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
       "Invert"]
GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
POLICIES = {"auto": 0, "rand": 1, "trivial": 2}
P_MIN = 1e-3  # smallest p-value a distribution test accepts (seeds are fixed)

_lib = None
_images = []  # (name, PIL image) of real photos: RGB, square RGB, L, portrait RGB

u8p = ctypes.POINTER(ctypes.c_uint8)
f32p = ctypes.POINTER(ctypes.c_float)
f64p = ctypes.POINTER(ctypes.c_double)
u32p = ctypes.POINTER(ctypes.c_uint32)
i32p = ctypes.POINTER(ctypes.c_int)
i64p = ctypes.POINTER(ctypes.c_int64)
U32, I32, D, U64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_double, ctypes.c_uint64


def _declare(lib):
    sig = {
        "hook_color": (ctypes.c_int, [ctypes.c_char_p, u8p, u8p, U32, U32, U32, D]),
        "hook_jitter": (ctypes.c_int, [u32p, f64p, u8p, u8p, U32, U32, U32]),
        "hook_jitter_draw": (None, [f64p, U64, u32p, f64p]),
        "hook_affine": (ctypes.c_int, [u8p, u8p, U32, U32, U32, D, I32, I32, D, D, D, f64p,
                                       ctypes.c_int, u8p]),
        "hook_rotate": (ctypes.c_int, [u8p, u8p, U32, U32, U32, D, ctypes.c_int, u8p]),
        "hook_affine_draw": (None, [f64p, f64p, f64p, f64p, U64, U32, U32, f64p]),
        "hook_aug_op": (ctypes.c_int, [ctypes.c_int, D, ctypes.c_int, u8p, u8p, u8p, U32, U32,
                                       U32]),
        "hook_aug_op_name": (ctypes.c_char_p, [ctypes.c_int]),
        "hook_aug_magnitude": (D, [ctypes.c_int, ctypes.c_int, U32, U32, U32, U32]),
        "hook_aug_draw": (ctypes.c_int, [ctypes.c_int, U32, U32, U32, U64, U32, U32, i32p,
                                         f64p]),
        "hook_blur": (ctypes.c_int, [u8p, u8p, U32, U32, U32, U32, U32, D, D]),
        "hook_blur_kernel": (None, [U32, D, f32p]),
        "hook_erase_draw": (None, [D, f64p, f64p, U64, U32, U32, u32p]),
        "hook_erase_apply": (None, [u32p, f32p, U32, U64, f32p, U32, U32, U32, ctypes.c_int]),
        "hook_mix_draw": (None, [f64p, U64, U32, U32, f64p]),
        "hook_mix_apply": (ctypes.c_int, [f64p, f32p, U32, U32, U32, U32, ctypes.c_int, i64p,
                                          U32, f32p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def ptr(a, kind):
    return a.ctypes.data_as(kind)


def dvec(*v):
    return np.array(v, dtype=np.float64)


def photos_dir():
    return os.environ.get("PRESTO_PHOTOS") or os.path.join(pt.SRC, "..", "shared", "photos")


def setUpModule():
    global _lib
    if torch is None:
        raise unittest.SkipTest("torch, torchvision or PIL is not importable")
    if not os.path.exists(HOOK):
        raise unittest.SkipTest("no %s (run make tests)" % HOOK)
    if os.environ.get("PRESTO_TRANSPORT") == "socket":
        raise unittest.SkipTest("no transport involved: run once, with the default one")
    _lib = ctypes.CDLL(HOOK)
    _declare(_lib)
    d = photos_dir()

    def photo(name):
        with Image.open(os.path.join(d, name)) as im:
            return im.convert("RGB")

    china, flower, grace = photo("china.jpg"), photo("flower.jpg"), photo("grace_hopper.jpg")
    _images.extend([
        ("china 143x107", china.crop((241, 117, 384, 224))),
        ("flower 112x112", flower.crop((274, 144, 386, 256))),
        ("grace L 91x67", grace.convert("L").crop((210, 95, 301, 162))),
        ("grace 80x107", grace.crop((205, 70, 285, 177))),
    ])


def as_array(img):
    a = np.ascontiguousarray(np.asarray(img))
    h, w = a.shape[:2]
    return a, h, w, (1 if a.ndim == 2 else a.shape[2])


def channels(img):
    return len(img.getbands())


# ---- presto's side, through the hook ----

def p_color(op, img, arg=0.0):
    a, h, w, c = as_array(img)
    out = np.empty_like(a)
    assert _lib.hook_color(op.encode(), ptr(a, u8p), ptr(out, u8p), h, w, c, arg) == 0
    return out


def p_aug_op(op, magnitude, img, interp=0, fill=None):
    a, h, w, c = as_array(img)
    out = np.empty_like(a)
    f = np.array(fill if fill else [0] * c, dtype=np.uint8)
    assert _lib.hook_aug_op(OPS.index(op), magnitude, interp, ptr(f, u8p), ptr(a, u8p),
                            ptr(out, u8p), h, w, c) == 0
    return out


def p_affine(img, angle, tx, ty, scale, shx, shy, interp, fill):
    a, h, w, c = as_array(img)
    out = np.empty_like(a)
    f = np.array(fill, dtype=np.uint8)
    _lib.hook_affine(ptr(a, u8p), ptr(out, u8p), h, w, c, angle, tx, ty, scale, shx, shy, None,
                     interp, ptr(f, u8p))
    return out


def p_rotate(img, angle, interp, fill):
    a, h, w, c = as_array(img)
    out = np.empty_like(a)
    f = np.array(fill, dtype=np.uint8)
    _lib.hook_rotate(ptr(a, u8p), ptr(out, u8p), h, w, c, angle, interp, ptr(f, u8p))
    return out


def p_aug_draw(policy, seed, h=4, w=4, num_ops=2, magnitude=9, bins=31):
    ops = np.zeros(16, dtype=np.int32)
    mags = np.zeros(16, dtype=np.float64)
    n = _lib.hook_aug_draw(POLICIES[policy], num_ops, magnitude, bins, seed, h, w,
                           ptr(ops, i32p), ptr(mags, f64p))
    return [(OPS[ops[i]], float(mags[i])) for i in range(n)]


def seeds(n, base):
    """n distinct 64-bit seeds (splitmix64 of base + k)."""
    m = (1 << 64) - 1
    out = []
    for k in range(n):
        x = (base + k * 0x9e3779b97f4a7c15) & m
        x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & m
        x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & m
        out.append(x ^ (x >> 31))
    return out


# ---- statistics ----

def chi2_two_sample(a, b):
    """Two-sample chi-square homogeneity test of two Counters: (statistic,
    degrees of freedom, p). Categories expected below 5 in either sample are
    pooled into one."""
    na, nb = sum(a.values()), sum(b.values())
    keys = sorted(set(a) | set(b), key=repr)
    cells, pool = [], [0, 0]
    for k in keys:
        ea, eb = (a[k] + b[k]) * na / (na + nb), (a[k] + b[k]) * nb / (na + nb)
        if min(ea, eb) < 5:
            pool[0] += a[k]
            pool[1] += b[k]
        else:
            cells.append((a[k], b[k]))
    if sum(pool):
        cells.append(tuple(pool))
    stat = 0.0
    for x, y in cells:
        if x + y:
            stat += (x * math.sqrt(nb / na) - y * math.sqrt(na / nb)) ** 2 / (x + y)
    df = max(len(cells) - 1, 1)
    p = float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                      torch.tensor(stat / 2.0, dtype=torch.float64)))
    return stat, df, p


def ks_two_sample(a, b):
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic p)."""
    a, b = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    v = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, v, side="right") / len(a)
                            - np.searchsorted(b, v, side="right") / len(b))))
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    p = 2.0 * sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam) for k in range(1, 101))
    return d, min(max(p, 0.0), 1.0)


class Figures:
    """Collects one line per check and prints them together."""

    def __init__(self, title):
        self.title, self.lines = title, []

    def add(self, fmt, *args):
        self.lines.append(fmt % args)

    def show(self):
        print("\n%s:\n  %s" % (self.title, "\n  ".join(self.lines)))


# ---- fidelity: the operations ----

class MagnitudeTest(unittest.TestCase):
    def test_tables_are_torchvisions(self):
        """presto's magnitude tables against torchvision's _augmentation_space
        (float32 values of torch.linspace, posterize bits, solarize levels)."""
        total = exact = 0
        worst = 0
        for policy, cls, bins_list in (("auto", AA.AutoAugment, [10]),
                                       ("rand", AA.RandAugment, [31, 11]),
                                       ("trivial", AA.TrivialAugmentWide, [31, 11])):
            for bins in bins_list:
                for h, w in ((224, 224), (151, 203), (97, 131), (600, 512)):
                    t = cls()
                    space = (t._augmentation_space(bins) if policy == "trivial"
                             else t._augmentation_space(bins, (h, w)))
                    for name, (mags, _) in space.items():
                        if mags.ndim == 0:
                            continue
                        for b in range(bins):
                            ours = _lib.hook_aug_magnitude(POLICIES[policy], OPS.index(name),
                                                           bins, b, h, w)
                            theirs = float(mags[b].item())
                            total += 1
                            exact += ours == theirs
                            ulp = abs(int(np.float32(ours).view(np.int32))
                                      - int(np.float32(theirs).view(np.int32)))
                            worst = max(worst, ulp)
                            self.assertLessEqual(ulp, 1, (policy, bins, name, b, ours, theirs))
        print("\nmagnitude tables: %d of %d values bit-identical to torchvision's, the rest "
              "within %d ulp (torch's linspace differs by CPU kernel)" % (exact, total, worst))
        self.assertEqual(np.float32(_lib.hook_aug_magnitude(2, OPS.index("Rotate"), 31, 20, 1, 1)),
                         np.float32(90.0))


class OpsTest(unittest.TestCase):
    def check(self, what, got, want):
        want = np.asarray(want)
        self.assertEqual(got.shape, want.shape, what)
        if not np.array_equal(got, want):
            diff = np.abs(got.astype(int) - want.astype(int))
            self.fail("%s: %d of %d bytes differ (max %d)" % (what, int((diff > 0).sum()),
                                                             diff.size, int(diff.max())))

    def test_every_op_every_magnitude(self):
        """Every op of the three policies at every bin and sign, on each photo,
        nearest: bit-identical to torchvision's _apply_op."""
        figs = Figures("policy ops vs torchvision's _apply_op")
        for policy, cls, bins in (("auto_augment", AA.AutoAugment, 10),
                                  ("rand_augment", AA.RandAugment, 31),
                                  ("trivial_augment_wide", AA.TrivialAugmentWide, 31)):
            n = 0
            for name_img, img in _images:
                w, h = img.size
                space = (cls()._augmentation_space(bins) if cls is AA.TrivialAugmentWide
                         else cls()._augmentation_space(bins, (h, w)))
                if cls is AA.AutoAugment:
                    space["Invert"] = (torch.tensor(0.0), False)
                for op, (mags, signed) in space.items():
                    values = [float(m) for m in mags] if mags.ndim > 0 else [0.0]
                    for v in values:
                        for m in ((v, -v) if signed else (v,)):
                            self.check((policy, op, m, name_img), p_aug_op(op, m, img),
                                       AA._apply_op(img, op, m, InterpolationMode.NEAREST,
                                                    None))
                            n += 1
            figs.add("%s: %d op applications (%d bins, both signs) on %d photos, all "
                     "bit-identical", policy, n, bins, len(_images))
        figs.show()

    def test_geometric_ops_bilinear_and_fill(self):
        """The geometric ops at every third bin, both signs, nearest and
        bilinear, with a fill, on a colour and a grey photo."""
        n = 0
        for _, img in (_images[0], _images[2]):
            w, h = img.size
            fill = [17, 200, 90][:channels(img)]
            for cls, bins in ((AA.RandAugment, 31), (AA.TrivialAugmentWide, 31)):
                space = (cls()._augmentation_space(bins) if cls is AA.TrivialAugmentWide
                         else cls()._augmentation_space(bins, (h, w)))
                for op in GEOMETRIC:
                    for v in space[op][0].tolist()[::3]:
                        for m in (v, -v):
                            for interp, mode in ((0, InterpolationMode.NEAREST),
                                                 (1, InterpolationMode.BILINEAR)):
                                self.check((op, m, mode, fill),
                                           p_aug_op(op, m, img, interp, fill),
                                           AA._apply_op(img, op, m, mode, fill))
                                n += 1
        print("\ngeometric ops, nearest and bilinear, fill %s: %d applications bit-identical"
              % ([17, 200, 90], n))

    def test_color_ops(self):
        n = 0
        for _, img in _images:
            for f in (0.0, 0.01, 0.3, 0.5, 0.999, 1.0, 1.2, 1.7, 2.5):
                for op, fn in (("brightness", F.adjust_brightness),
                               ("contrast", F.adjust_contrast),
                               ("saturation", F.adjust_saturation),
                               ("sharpness", F.adjust_sharpness)):
                    self.check((op, f), p_color(op, img, f), fn(img, f))
                    n += 1
            for hue in (-0.5, -0.31, -0.1, -0.004, 0.0, 0.002, 0.1, 0.25, 0.5):
                self.check(("hue", hue), p_color("hue", img, hue), F.adjust_hue(img, hue))
                n += 1
            self.check("grayscale", p_color("grayscale", img),
                       F.rgb_to_grayscale(img, num_output_channels=channels(img)))
            for bits in range(9):
                self.check(("posterize", bits), p_color("posterize", img, bits),
                           F.posterize(img, bits))
            for t in (0, 1, 100.5, 128, 254.99, 255, 256):
                self.check(("solarize", t), p_color("solarize", img, t), F.solarize(img, t))
            n += 1 + 9 + 7
        print("\nbrightness, contrast, saturation, sharpness, hue, grayscale, posterize, "
              "solarize: %d applications bit-identical" % n)

    def test_color_jitter_in_drawn_order(self):
        """ColorJitter's forward with presto's decision (its get_params
        replaced) gives presto's bytes."""
        cj = T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
        ranges = dvec(*cj.brightness, *cj.contrast, *cj.saturation, *cj.hue)
        n = 0
        for k, seed in enumerate(seeds(40, 1)):
            order = np.zeros(4, dtype=np.uint32)
            factor = np.zeros(4, dtype=np.float64)
            _lib.hook_jitter_draw(ptr(ranges, f64p), seed, ptr(order, u32p), ptr(factor, f64p))
            decision = (torch.tensor(order.astype(np.int64)), *[float(x) for x in factor])
            img = _images[k % len(_images)][1]
            a, h, w, c = as_array(img)
            out = np.empty_like(a)
            _lib.hook_jitter(ptr(order, u32p), ptr(factor, f64p), ptr(a, u8p), ptr(out, u8p),
                             h, w, c)
            with mock.patch.object(T.ColorJitter, "get_params", return_value=decision):
                self.check(("color_jitter", order, factor), out, cj(img))
            n += 1
        print("\ncolor_jitter: %d draws applied in their order, bit-identical" % n)

    def test_rotate_and_affine(self):
        rng = np.random.default_rng(7)
        n = 0
        for _, img in _images:
            c = channels(img)
            for k in range(40):
                interp = k % 2
                mode = (InterpolationMode.NEAREST, InterpolationMode.BILINEAR)[interp]
                fill = [int(x) for x in rng.integers(0, 256, c)]
                angle = float(rng.choice([0.0, 90.0, -90.0, 180.0, 270.0, 45.0])
                              if k % 5 == 0 else rng.uniform(-180, 180))
                tx, ty = (int(x) for x in rng.integers(-40, 40, 2))
                scale = float(rng.uniform(0.6, 1.4))
                shx, shy = (float(x) for x in rng.uniform(-30, 30, 2))
                self.check(("affine", angle, tx, ty, scale, shx, shy, mode),
                           p_affine(img, angle, tx, ty, scale, shx, shy, interp, fill),
                           F.affine(img, angle, [tx, ty], scale, [shx, shy], mode, fill))
                self.check(("rotate", angle, mode), p_rotate(img, angle, interp, fill),
                           F.rotate(img, angle, mode, fill=fill))
                n += 2
        print("\nrotate and affine at random angles, shifts, scales, shears, nearest and "
              "bilinear, random fills: %d bit-identical" % n)

    def test_random_affine_and_rotation_forward(self):
        """RandomAffine's and RandomRotation's forward with presto's decision."""
        ra = T.RandomAffine(degrees=30, translate=(0.1, 0.2), scale=(0.8, 1.2),
                            shear=(-10, 10, -5, 5), interpolation=InterpolationMode.BILINEAR,
                            fill=40)
        for k, seed in enumerate(seeds(12, 2)):
            img = _images[k % len(_images)][1]
            w, h = img.size
            d = np.zeros(6)
            _lib.hook_affine_draw(ptr(dvec(-30, 30), f64p), ptr(dvec(0.1, 0.2), f64p),
                                  ptr(dvec(0.8, 1.2), f64p), ptr(dvec(-10, 10, -5, 5), f64p),
                                  seed, h, w, ptr(d, f64p))
            decision = (d[0], (int(d[1]), int(d[2])), d[3], (d[4], d[5]))
            fill = [40] * channels(img)
            with mock.patch.object(T.RandomAffine, "get_params", return_value=decision):
                self.check(("random_affine", decision),
                           p_affine(img, d[0], int(d[1]), int(d[2]), d[3], d[4], d[5], 1, fill),
                           ra(img))
            rr = T.RandomRotation(45, fill=fill)
            with mock.patch.object(T.RandomRotation, "get_params", return_value=d[0]):
                self.check(("random_rotation", d[0]), p_rotate(img, d[0], 0, fill), rr(img))


class BlurTest(unittest.TestCase):
    def test_kernels(self):
        worst = 0
        for k in (1, 3, 5, 7, 9, 13, 15, 17, 23, 31):
            for s in (0.1, 0.5, 1.0, 1.7, 2.0, 5.0):
                ours = np.zeros(k, dtype=np.float32)
                _lib.hook_blur_kernel(k, s, ptr(ours, f32p))
                theirs = _get_gaussian_kernel1d(k, s).numpy()
                ulp = int(np.max(np.abs(ours.view(np.int32).astype(np.int64)
                                        - theirs.view(np.int32).astype(np.int64))))
                worst = max(worst, ulp)
        print("\ngaussian kernels: within %d ulp of torchvision's (its exp is Sleef's "
              "vectorized one)" % worst)
        self.assertLessEqual(worst, 1)

    def test_blur_within_tolerance(self):
        differ = total = 0
        worst = 0
        for _, img in _images:
            a, h, w, c = as_array(img)
            for kx, ky, sx, sy in ((3, 3, 0.5, 0.5), (5, 5, 1.0, 1.0), (23, 23, 1.5, 1.5),
                                   (9, 5, 2.0, 0.7), (23, 23, 0.1, 0.1), (7, 7, 5.0, 5.0)):
                out = np.empty_like(a)
                self.assertEqual(_lib.hook_blur(ptr(a, u8p), ptr(out, u8p), h, w, c, kx, ky, sx,
                                                sy), 0)
                want = np.asarray(F.gaussian_blur(img, [kx, ky], [sx, sy]))
                d = np.abs(out.astype(int) - want.astype(int))
                worst = max(worst, int(d.max()))
                differ += int((d > 0).sum())
                total += d.size
        print("\ngaussian_blur vs torchvision: %d of %d values differ (%.5f%%), by at most %d "
              "(tolerance: 1, and 0.01%% of values)" % (differ, total, 100.0 * differ / total,
                                                       worst))
        self.assertLessEqual(worst, 1)
        self.assertLessEqual(differ, total * 1e-4)


class FloatStepsTest(unittest.TestCase):
    def normalized(self, size=(48, 64)):
        tf = T.Compose([T.Resize(list(size)), T.ToTensor(),
                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        return torch.stack([tf(img.convert("RGB")) for _, img in _images])  # N, 3, H, W

    def test_erase_box_with_value(self):
        x = self.normalized()[0]
        c, h, w = x.shape
        for value in ([0.0], [0.5, -1.25, 2.0]):
            for k, seed in enumerate(seeds(10, 3)):
                box = np.zeros(4, dtype=np.uint32)
                _lib.hook_erase_draw(1.0, ptr(dvec(0.02, 0.33), f64p),
                                     ptr(dvec(0.3, 3.3), f64p), seed, h, w, ptr(box, u32p))
                v = np.array(value, dtype=np.float32)
                for nchw in (1, 0):
                    arr = np.array(x.numpy() if nchw else x.permute(1, 2, 0).numpy(),
                                   order="C")  # a copy: the hook writes into it
                    _lib.hook_erase_apply(ptr(box, u32p), ptr(v, f32p), len(value), seed,
                                          ptr(arr, f32p), h, w, c, nchw)
                    re = T.RandomErasing(p=1.0, value=value[0] if len(value) == 1 else
                                         tuple(value))
                    i, j, eh, ew = (int(t) for t in box)
                    params = (i, j, eh, ew, torch.tensor(value)[:, None, None])
                    if eh == 0:
                        params = (0, 0, h, w, x)
                    with mock.patch.object(T.RandomErasing, "get_params", return_value=params):
                        want = re(x.clone())
                    got = torch.from_numpy(arr if nchw else arr.transpose(2, 0, 1).copy())
                    self.assertTrue(torch.equal(got, want), (value, box, nchw))

    def test_erase_random_values_are_normal(self):
        c, h, w = 3, 100, 120
        arr = np.zeros((c, h, w), dtype=np.float32)
        box = np.array([10, 20, 80, 90], dtype=np.uint32)
        _lib.hook_erase_apply(ptr(box, u32p), None, 0, 99, ptr(arr, f32p), h, w, c, 1)
        inside = arr[:, 10:90, 20:110]
        self.assertEqual(float(np.abs(arr).sum() - np.abs(inside).sum()), 0.0)
        z = inside.ravel()
        torch.manual_seed(0)
        d, p = ks_two_sample(z, torch.empty(z.size).normal_().numpy())
        print("\nrandom_erasing value random: %d draws, mean %.4f, std %.4f, KS against torch's "
              "normal_ D %.4f p %.3f" % (z.size, z.mean(), z.std(), d, p))
        self.assertGreater(p, P_MIN)

    def test_mixup_cutmix_match_reference(self):
        import tvmix
        x = self.normalized((40, 56))
        labels = torch.tensor([3, 0, 7, 3], dtype=torch.int64)
        k = 10
        n, c, h, w = x.shape
        for dec in ((1, 0.3127, 0, 0, 0, 0), (1, 0.9, 0, 0, 0, 0), (1, 0.0, 0, 0, 0, 0),
                    (2, 0.0, 5, 3, 40, 29), (2, 0.0, 0, 0, 56, 40), (2, 0.0, 10, 10, 10, 30)):
            kind, lam, x1, y1, x2, y2 = dec
            if kind == 2:
                lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
                want, want_t = tvmix.Cutmix(k)(x, labels, box=(x1, y1, x2, y2))
            else:
                want, want_t = tvmix.Mixup(k)(x, labels, lam=lam)
            for nchw in (1, 0):
                arr = np.array(x.numpy() if nchw else x.permute(0, 2, 3, 1).numpy(),
                               order="C")  # a copy: the hook writes into it
                t = np.zeros((n, k), dtype=np.float32)
                lab = labels.numpy().copy()
                self.assertEqual(_lib.hook_mix_apply(ptr(dvec(kind, lam, x1, y1, x2, y2), f64p),
                                                     ptr(arr, f32p), n, h, w, c, nchw,
                                                     ptr(lab, i64p), k, ptr(t, f32p)), 0)
                got = torch.from_numpy(arr if nchw else arr.transpose(0, 3, 1, 2).copy())
                self.assertTrue(torch.equal(got, want), ("batch", dec, nchw))
                self.assertTrue(torch.equal(torch.from_numpy(t), want_t), ("targets", dec))
        print("\nmixup and cutmix: batches and soft targets bit-identical to the reference "
              "scripts' algorithm with the same lambda and box")


# ---- distributions of the decisions ----

def record_policy(transform, n, size=(4, 4)):
    """torchvision's own decisions: the (op, magnitude) lists its forward
    passes to _apply_op over n draws, with the space memoized (a pure
    function of its arguments)."""
    transform._augmentation_space = functools.lru_cache(None)(transform._augmentation_space)
    img = Image.new("RGB", size)
    current = []

    def fake(image, op, magnitude, interpolation, fill):
        current.append((op, float(magnitude)))
        return image

    out = []
    with mock.patch.object(AA, "_apply_op", fake):
        for _ in range(n):
            current.clear()
            transform(img)
            out.append(tuple(current))
    return out


class DrawsTest(unittest.TestCase):
    N = 12000

    def assert_same(self, figs, what, ours, theirs, kind="chi2"):
        if kind == "chi2":
            stat, df, p = chi2_two_sample(collections.Counter(ours), collections.Counter(theirs))
            figs.add("%s: chi-square %.1f, %d df, p %.3f", what, stat, df, p)
        else:
            d, p = ks_two_sample(ours, theirs)
            figs.add("%s: KS D %.4f, p %.3f", what, d, p)
        self.assertGreater(p, P_MIN, what)

    def test_trivial_augment_wide(self):
        torch.manual_seed(11)
        theirs = [r[0] for r in record_policy(AA.TrivialAugmentWide(), self.N)]
        ours = [p_aug_draw("trivial", s)[0] for s in seeds(self.N, 11)]
        figs = Figures("trivial_augment_wide, %d draws each" % self.N)
        self.assert_same(figs, "op", [o for o, _ in ours], [o for o, _ in theirs])
        self.assert_same(figs, "op, magnitude and sign", ours, theirs)
        signed = [m < 0 for o, m in ours if o in ("ShearX", "Rotate", "Brightness") and m != 0]
        signed_t = [m < 0 for o, m in theirs if o in ("ShearX", "Rotate", "Brightness") and m != 0]
        self.assert_same(figs, "sign of ShearX, Rotate, Brightness", signed, signed_t)
        figs.show()

    def test_rand_augment(self):
        torch.manual_seed(12)
        theirs = record_policy(AA.RandAugment(num_ops=2, magnitude=9), self.N // 2)
        ours = [tuple(p_aug_draw("rand", s, num_ops=2, magnitude=9)) for s in
                seeds(self.N // 2, 12)]
        figs = Figures("rand_augment (2 ops, magnitude 9), %d draws each" % (self.N // 2))
        self.assertTrue(all(len(r) == 2 for r in theirs + ours))
        self.assert_same(figs, "first op", [r[0][0] for r in ours], [r[0][0] for r in theirs])
        self.assert_same(figs, "second op", [r[1][0] for r in ours], [r[1][0] for r in theirs])
        self.assert_same(figs, "op and signed magnitude", [x for r in ours for x in r],
                         [x for r in theirs for x in r])
        figs.show()

    def test_auto_augment_imagenet(self):
        torch.manual_seed(13)
        theirs = record_policy(AA.AutoAugment(), self.N, size=(224, 224))
        ours = [tuple(p_aug_draw("auto", s, 224, 224)) for s in seeds(self.N, 13)]
        figs = Figures("auto_augment (ImageNet policy), %d draws each" % self.N)
        self.assert_same(figs, "number of ops applied", [len(r) for r in ours],
                         [len(r) for r in theirs])
        self.assert_same(figs, "applied op sequence with magnitudes", ours, theirs)
        figs.show()

    def test_color_jitter(self):
        cj = T.ColorJitter(brightness=0.4, contrast=(0.2, 1.5), saturation=0.4, hue=0.1)
        ranges = dvec(*cj.brightness, *cj.contrast, *cj.saturation, *cj.hue)
        torch.manual_seed(14)
        theirs = [T.ColorJitter.get_params(cj.brightness, cj.contrast, cj.saturation, cj.hue)
                  for _ in range(self.N)]
        ours = []
        for s in seeds(self.N, 14):
            order = np.zeros(4, dtype=np.uint32)
            factor = np.zeros(4)
            _lib.hook_jitter_draw(ptr(ranges, f64p), s, ptr(order, u32p), ptr(factor, f64p))
            ours.append((tuple(order.tolist()), factor.copy()))
        figs = Figures("color_jitter, %d draws each" % self.N)
        self.assert_same(figs, "order (24 permutations)", [o for o, _ in ours],
                         [tuple(t[0].tolist()) for t in theirs])
        for f, name in enumerate(("brightness", "contrast", "saturation", "hue")):
            self.assert_same(figs, name, [x[1][f] for x in ours], [t[1 + f] for t in theirs],
                             "ks")
        figs.show()

    def test_random_affine(self):
        torch.manual_seed(15)
        h, w = 120, 200
        theirs = [T.RandomAffine.get_params([-30.0, 30.0], [0.1, 0.2], [0.8, 1.2],
                                            [-10.0, 10.0, -5.0, 5.0], [w, h])
                  for _ in range(self.N)]
        ours = []
        for s in seeds(self.N, 15):
            d = np.zeros(6)
            _lib.hook_affine_draw(ptr(dvec(-30, 30), f64p), ptr(dvec(0.1, 0.2), f64p),
                                  ptr(dvec(0.8, 1.2), f64p), ptr(dvec(-10, 10, -5, 5), f64p), s,
                                  h, w, ptr(d, f64p))
            ours.append(d)
        ours = np.array(ours)
        figs = Figures("random_affine on %dx%d, %d draws each" % (w, h, self.N))
        self.assert_same(figs, "angle", ours[:, 0], [t[0] for t in theirs], "ks")
        self.assert_same(figs, "tx", ours[:, 1].astype(int).tolist(), [t[1][0] for t in theirs])
        self.assert_same(figs, "ty", ours[:, 2].astype(int).tolist(), [t[1][1] for t in theirs])
        self.assert_same(figs, "scale", ours[:, 3], [t[2] for t in theirs], "ks")
        self.assert_same(figs, "shear x", ours[:, 4], [t[3][0] for t in theirs], "ks")
        self.assert_same(figs, "shear y", ours[:, 5], [t[3][1] for t in theirs], "ks")
        figs.show()

    def test_random_erasing(self):
        n = self.N * 2 // 3  # torch's get_params is slow
        figs = Figures("random_erasing boxes (scale 0.02-0.33, ratio 0.3-3.3), %d draws each"
                       % n)
        for h, w in ((224, 224), (60, 300)):
            torch.manual_seed(16)
            img = torch.zeros(3, h, w)
            theirs, ours = [], []
            for _ in range(n):
                i, j, eh, ew, _v = T.RandomErasing.get_params(img, (0.02, 0.33), (0.3, 3.3),
                                                              [0.0])
                theirs.append((i, j, eh, ew) if (eh, ew) != (h, w) else None)
            for s in seeds(n, 16):
                box = np.zeros(4, dtype=np.uint32)
                _lib.hook_erase_draw(1.0, ptr(dvec(0.02, 0.33), f64p), ptr(dvec(0.3, 3.3), f64p),
                                     s, h, w, ptr(box, u32p))
                ours.append(tuple(int(v) for v in box) if box[2] else None)
            self.assert_same(figs, "%dx%d: no box fits" % (w, h), [b is None for b in ours],
                             [b is None for b in theirs])
            ob = np.array([b for b in ours if b], dtype=np.float64)
            tb = np.array([b for b in theirs if b], dtype=np.float64)
            self.assert_same(figs, "%dx%d: area" % (w, h), ob[:, 2] * ob[:, 3],
                             tb[:, 2] * tb[:, 3], "ks")
            self.assert_same(figs, "%dx%d: log aspect h/w" % (w, h), np.log(ob[:, 2] / ob[:, 3]),
                             np.log(tb[:, 2] / tb[:, 3]), "ks")
            self.assert_same(figs, "%dx%d: top / room" % (w, h),
                             ob[:, 0] / (h - ob[:, 2] + 1), tb[:, 0] / (h - tb[:, 2] + 1), "ks")
            self.assert_same(figs, "%dx%d: left / room" % (w, h),
                             ob[:, 1] / (w - ob[:, 3] + 1), tb[:, 1] / (w - tb[:, 3] + 1), "ks")
        figs.show()

    def test_mixup_cutmix(self):
        """The reference collate function's decisions (RandomChoice, then
        mixup's or cutmix's draws), read back from its output on a batch of
        two images, against presto's."""
        import tvmix
        n = self.N // 4
        h, w = 16, 24
        batch = torch.stack([torch.zeros(1, h, w), torch.ones(1, h, w)])
        labels = torch.tensor([0, 1])
        collate = tvmix.collate_fn(2, 0.2, 1.0)
        chosen = []
        for mixer in collate.mixers:  # record which one RandomChoice picks
            def spy(*args, _mixer=mixer, _call=type(mixer).__call__, **kw):
                chosen.append(type(_mixer).__name__)
                return _call(_mixer, *args, **kw)
            mixer.__call__ = spy
        collate.mixers = [m.__call__ for m in collate.mixers]
        torch.manual_seed(17)
        random.seed(17)
        theirs = []
        for _ in range(n):
            out, t = collate([(batch[0], labels[0]), (batch[1], labels[1])])
            if chosen[-1] == "Cutmix":  # sample 0 (zeros) got a box of sample 1's ones
                area = int((out[0, 0] == 1).sum()) / (h * w)
                theirs.append(("cutmix", float(t[0, 0]), area))
            else:  # target 0 is lambda (its partner is sample 1)
                theirs.append(("mixup", float(t[0, 0]), None))
        ours = []
        for s in seeds(n, 17):
            d = np.zeros(6)
            _lib.hook_mix_draw(ptr(dvec(0.2, 1.0, 1.0, 0.5), f64p), s, h, w, ptr(d, f64p))
            kind = {1: "mixup", 2: "cutmix"}[int(d[0])]
            area = (d[4] - d[2]) * (d[5] - d[3]) / (h * w) if kind == "cutmix" else None
            ours.append((kind, d[1], area))
        figs = Figures("mixup 0.2 / cutmix 1.0, switch 0.5, %d batches each" % n)
        self.assert_same(figs, "kind", [k for k, _, _ in ours], [k for k, _, _ in theirs])
        self.assert_same(figs, "mixup lambda", [l for k, l, _ in ours if k == "mixup"],
                         [l for k, l, _ in theirs if k == "mixup"], "ks")
        self.assert_same(figs, "cutmix box area", [a for k, _, a in ours if k == "cutmix"],
                         [a for k, _, a in theirs if k == "cutmix"], "ks")
        self.assert_same(figs, "cutmix lambda (1 - area)",
                         [l for k, l, _ in ours if k == "cutmix"],
                         [l for k, l, _ in theirs if k == "cutmix"], "ks")
        figs.show()


if __name__ == "__main__":
    unittest.main()
