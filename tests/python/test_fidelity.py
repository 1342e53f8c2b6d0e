"""Fidelity: presto's tensors against torchvision's and PIL's on the same JPEGs.

A real prestod serves one data set (JPEGs made from the photos by mkdataset.py:
several sizes, both orientations, grey and colour, 4:2:0 and 4:4:4) through
many pipelines, and the batches pulled with the Python binding (no shuffle,
so sample i of a stream is file i in ImageFolder order) are compared with
torchvision 0.14's transforms on PIL images:

- decode: bit-identical to PIL (RGB and L), through a center_crop large
  enough to hold every image (a pure copy), so decode alone has a fixed shape;
- Resize(256) + CenterCrop(224) at every split point: the mean absolute
  difference must stay <= 0.5 and every pixel within 3 (they are equal);
  with dct_scale the PSNR must be >= 35 dB;
- normalize / to_float: within 1e-5 of ToTensor + Normalize on the same
  uint8 input (they are equal), NCHW and NHWC;
- random steps: torch's generator cannot be reproduced, so presto cannot
  draw torch's crops and flips. Instead (1) a replica of presto's draws
  (splitmix64 from the per-sample seed, see daemon/pipeline.c and
  daemon/steps/rrc.c) predicts every crop box and flip, and torchvision's
  F.resized_crop + F.hflip with those draws must give presto's bytes
  exactly; (2) the replica's boxes must follow the distribution of
  RandomResizedCrop.get_params (two-sample Kolmogorov-Smirnov on the area
  fraction and the log aspect ratio, and the fallback rate), the flip rate
  its binomial bounds; (3) the same (seed, epoch) gives the same bytes with
  1 or 2 workers, cold or warm cache, 1 or 2 ranks, shuffled or not, and
  another epoch or seed different bytes.

Run: tests/python/run.sh -k fidelity (see prestotest.py for the environment).
Figures are printed (run with -v to see them).
"""

import collections
import hashlib
import json
import math
import os
import unittest

import numpy as np

import prestotest as pt
import presto

try:
    import torch
    from PIL import Image, JpegImagePlugin
    from torchvision import datasets as tv_datasets
    from torchvision import transforms as T
    from torchvision.transforms import functional as F
except ImportError:  # the whole module skips
    torch = None

COUNT, CLASSES = 24, 3
MIN_SIDE, MAX_SIDE = 120, 720   # longer sides: some shorter sides below 224
BIG_COUNT, BIG_MIN, BIG_MAX = 12, 800, 1400  # large enough for a reduced DCT scale
CANVAS = MAX_SIDE               # center_crop that holds every image whole
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = 8
EVAL = ["decode", {"resize": 256}, {"center_crop": 224}]
TRAIN = ["decode", {"resize": 256}, {"random_resized_crop": 224}, "random_flip"]
FLIP_EPOCHS = 20


def _pipelines():
    """name -> (steps, split or None for the default[, "big": the large JPEGs])."""
    norm = {"mean": MEAN, "std": STD}
    p = {
        "decode": (["decode", {"center_crop": CANVAS}], "decode"),
        "decode-grey": ([{"decode": "grey"}, {"center_crop": CANVAS}], "decode"),
        "eval-grey": ([{"decode": "grey"}, {"resize": 256}, {"center_crop": 224}], 2),
        "dct": ([{"decode": {"dct_scale": True}}, {"resize": 256}, {"center_crop": 224}],
                "resize", "big"),
        "norm-nchw": (EVAL + [{"normalize": dict(norm, layout="nchw")}], None),
        "norm-nhwc": (EVAL + [{"normalize": dict(norm, layout="nhwc")}], None),
        "float-nchw": (EVAL + [{"to_float": "nchw"}], None),
        "train": (TRAIN, "resize"),
        "repro": (TRAIN + [{"normalize": dict(norm, layout="nchw")}], "resize"),
        "flip-50": (["decode", {"resize": 32}, {"center_crop": 32}, {"random_flip": 0.5}],
                    "center_crop"),
        "flip-25": (["decode", {"resize": 32}, {"center_crop": 32}, {"random_flip": 0.25}],
                    "center_crop"),
        "noflip": (["decode", {"resize": 32}, {"center_crop": 32}], None),
    }
    for split in range(4):
        p["eval-%d" % split] = (EVAL, split)
    return p


PIPELINES = _pipelines()

_dir = _root = _daemon = _daemon1 = None
_files = []      # (path, label) in ImageFolder order = presto's sample ids
_big_files = []  # the same for the large JPEGs


def setUpModule():
    global _dir, _root, _daemon, _daemon1, _files, _big_files
    if torch is None:
        raise unittest.SkipTest("torch, torchvision or PIL is not importable")
    _dir = pt.tempdir()
    _root = pt.make_dataset(os.path.join(_dir, "data"), COUNT, CLASSES, seed=11,
                            min_side=MIN_SIDE, max_side=MAX_SIDE, grey_every=4, jobs=2)
    big = pt.make_dataset(os.path.join(_dir, "big"), BIG_COUNT, CLASSES, seed=12,
                          min_side=BIG_MIN, max_side=BIG_MAX, grey_every=4, jobs=2)
    ds = []
    for name, (steps, split, *where) in PIPELINES.items():
        d = {"name": name, "root": big if where else _root, "steps": steps}
        if split is not None:
            d["split"] = split
        ds.append(d)
    config = os.path.join(_dir, "prestod.yaml")
    with open(config, "w") as f:
        json.dump({"datasets": ds}, f, indent=1)  # JSON is YAML
    _files = tv_datasets.ImageFolder(_root).samples
    _big_files = tv_datasets.ImageFolder(big).samples
    _daemon = pt.Daemon(_dir, ["-c", config, "-m", "256MiB"])          # 2 workers
    _daemon1 = pt.Daemon(_dir, ["-c", config, "-m", "256MiB", "-w", "1"], name="prestod1")


def tearDownModule():
    if _dir:
        pt.finish(_dir, _daemon, _daemon1)


def pull(sock, name, **kw):
    """(labels, images) of a whole stream, no shuffle unless asked."""
    kw.setdefault("shuffle", False)
    kw.setdefault("batch_size", BATCH)
    labels, images = [], []
    with presto.Client(sock) as c, c.stream(name, **kw) as s:
        for b in s:
            labels.append(b.labels.copy())
            images.append(b.images.copy())
        if not images:
            raise AssertionError("%s delivered no sample (%d skipped; see the daemon's log)"
                                 % (name, s.skipped))
    return np.concatenate(labels), np.concatenate(images)


_pil_cache = {}


def pil(i, mode="RGB", files=None):
    files = files or _files
    key = (files[i][0], mode)
    if key not in _pil_cache:
        with Image.open(files[i][0]) as im:
            _pil_cache[key] = im.convert(mode)
    return _pil_cache[key]


def eval_ref(i, mode="RGB", files=None):
    return np.asarray(F.center_crop(F.resize(pil(i, mode, files), 256), 224))


def dct_eighths(w, h):
    """The DCT scale (in eighths) decode with dct_scale picks for a w x h
    JPEG before Resize(256): the smallest of 1/8 to 4/8 that covers 5/4 of
    the resize's output, else 8/8 (daemon/steps/decode.c)."""
    short, long_ = min(w, h), max(w, h)
    need_long = int(256 * long_ / short)
    need_w, need_h = (256, need_long) if w <= h else (need_long, 256)
    for k in range(1, 5):
        if 4 * -(-w * k // 8) >= 5 * need_w and 4 * -(-h * k // 8) >= 5 * need_h:
            return k
    return 8


def diff_stats(got, want):
    d = np.abs(got.astype(np.int16) - want.astype(np.int16))
    return float(d.mean()), int(d.max())


def psnr(mse):
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


class DataSetTest(unittest.TestCase):
    def test_covers_every_kind_of_jpeg(self):
        kinds = collections.Counter()
        sizes = set()
        for path, _ in _files:
            with Image.open(path) as im:
                w, h = im.size
                sizes.add((w, h))
                kinds["portrait" if h > w else "landscape"] += 1
                kinds["grey" if im.mode == "L" else "colour"] += 1
                if im.mode != "L":
                    kinds[{0: "4:4:4", 2: "4:2:0"}.get(JpegImagePlugin.get_sampling(im),
                                                       "other")] += 1
        print("\ndata set: %d JPEGs, %d sizes, %s" % (len(_files), len(sizes), dict(kinds)))
        self.assertEqual(len(_files), COUNT)
        for k in ("portrait", "landscape", "grey", "colour", "4:4:4", "4:2:0"):
            self.assertGreater(kinds[k], 0, k)
        self.assertGreater(len(sizes), COUNT // 2)


class DecodeTest(unittest.TestCase):
    def check(self, name, mode):
        labels, images = pull(_daemon.sock, name)
        self.assertEqual(list(labels), [label for _, label in _files])
        for i in range(COUNT):
            want = np.asarray(F.center_crop(pil(i, mode), CANVAS))
            got = images[i] if mode == "RGB" else images[i][..., 0]
            self.assertEqual(got.shape, want.shape)
            self.assertTrue(np.array_equal(got, want),
                            "%s: %s differs from PIL in %d bytes" % (
                                name, _files[i][0], int((got != want).sum())))
        print("\ndecode (%s): %d images bit-identical to PIL" % (mode, COUNT))

    def test_rgb_bit_identical_to_pil(self):
        self.check("decode", "RGB")

    def test_grey_bit_identical_to_pil(self):
        self.check("decode-grey", "L")


class ResizeCropTest(unittest.TestCase):
    def check_split(self, split):
        names = {0: "nothing", 1: "decode", 2: "resize", 3: "center_crop"}
        _, images = pull(_daemon.sock, "eval-%d" % split)
        self.assertEqual(len(images), COUNT)
        mean, mx = diff_stats(images, np.stack([eval_ref(i) for i in range(COUNT)]))
        print("\nResize(256)+CenterCrop(224), offline up to %s: mean abs diff %.4f, "
              "max %d" % (names[split], mean, mx))
        self.assertLessEqual(mean, 0.5)
        self.assertLessEqual(mx, 3)

    def test_every_split_point(self):
        for split in (1, 2, 3):
            self.check_split(split)

    def test_nothing_offline(self):
        self.check_split(0)

    def test_grey(self):
        _, images = pull(_daemon.sock, "eval-grey")
        mean, mx = diff_stats(images[..., 0], np.stack([eval_ref(i, "L") for i in range(COUNT)]))
        print("\nResize(256)+CenterCrop(224) in mode L: mean abs diff %.4f, max %d" % (mean, mx))
        self.assertLessEqual(mean, 0.5)
        self.assertLessEqual(mx, 3)

    def test_dct_scale_psnr(self):
        _, images = pull(_daemon.sock, "dct")
        refs = np.stack([eval_ref(i, files=_big_files) for i in range(BIG_COUNT)])
        errs = [(images[i].astype(np.float64) - refs[i]) ** 2 for i in range(BIG_COUNT)]
        total = psnr(float(np.mean(errs)))
        worst = min(psnr(float(e.mean())) for e in errs)
        mean, mx = diff_stats(images, refs)
        scales = collections.Counter("%d/8" % dct_eighths(*pil(i, files=_big_files).size)
                                     for i in range(BIG_COUNT))
        print("\ndct_scale + Resize(256)+CenterCrop(224) of %d JPEGs of %d-%d pixels, decoded "
              "at %s: PSNR %.2f dB over the data set (worst image %.2f dB), mean abs diff "
              "%.3f, max %d" % (BIG_COUNT, BIG_MIN, BIG_MAX, dict(scales), total, worst, mean,
                                mx))
        self.assertGreaterEqual(BIG_COUNT - scales["8/8"], BIG_COUNT // 2)
        self.assertGreaterEqual(total, 35.0)


class NormalizeTest(unittest.TestCase):
    def test_matches_totensor_normalize(self):
        _, u8 = pull(_daemon.sock, "eval-3")
        tf = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
        want = np.stack([tf(Image.fromarray(x)).numpy() for x in u8])       # NCHW
        want_f = np.stack([T.ToTensor()(Image.fromarray(x)).numpy() for x in u8])
        cases = [("norm-nchw", want, True), ("norm-nhwc", want.transpose(0, 2, 3, 1), False),
                 ("float-nchw", want_f, True)]
        for name, ref, _ in cases:
            _, got = pull(_daemon.sock, name)
            self.assertEqual(got.dtype, np.float32)
            self.assertEqual(got.shape, ref.shape)  # the binding shapes NCHW batches itself
            err = float(np.max(np.abs(got - ref)))
            exact = int(np.sum(got.view(np.uint32) != ref.view(np.uint32)))
            print("\n%s vs torchvision ToTensor%s: max abs error %.3g, %d of %d floats "
                  "not bit-identical" % (name, "" if name.startswith("float") else
                                         "+Normalize", err, exact, got.size))
            self.assertLessEqual(err, 1e-5)


# ---- a replica of presto's random draws (daemon/hash.c, daemon/steps/*.c) ----

M64 = (1 << 64) - 1


def mix64(x):
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


class Rng:
    """hash_rand01: splitmix64 doubles in [0, 1)."""

    def __init__(self, state):
        self.state = state

    def rand01(self):
        self.state = (self.state + 0x9e3779b97f4a7c15) & M64
        return (mix64(self.state) >> 11) * 2.0 ** -53


def step_rng(seed, epoch, sample, step_index):
    """The state step number step_index starts from for a sample: the
    pipeline's per-sample seed, mixed with the step's index."""
    sample_seed = mix64(mix64(mix64(seed) ^ epoch) ^ sample)
    return Rng(mix64((sample_seed + step_index) & M64))


def rrc_params(rng, h, w, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """step_rrc_params: (top, left, h, w, fell_back)."""
    area = float(h) * w
    lr0, lr1 = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * (scale[0] + (scale[1] - scale[0]) * rng.rand01())
        aspect = math.exp(lr0 + (lr1 - lr0) * rng.rand01())
        cw = round(math.sqrt(target * aspect))
        ch = round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            top = min(int(rng.rand01() * (h - ch + 1.0)), h - ch)
            left = min(int(rng.rand01() * (w - cw + 1.0)), w - cw)
            return top, left, ch, cw, False
    ch, cw = h, w
    if w / h < ratio[0]:
        ch = min(max(round(w / ratio[0]), 1), h)
    elif w / h > ratio[1]:
        cw = min(max(round(h * ratio[1]), 1), w)
    return (h - ch) // 2, (w - cw) // 2, ch, cw, True


def ks_statistic(a, b):
    """Two-sample Kolmogorov-Smirnov D."""
    a, b = np.sort(a), np.sort(b)
    v = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, v, side="right") / len(a)
                               - np.searchsorted(b, v, side="right") / len(b))))


class RandomStepsTest(unittest.TestCase):
    def test_draws_give_torchvisions_pixels(self):
        """With presto's own draws, torchvision's resized_crop and hflip
        make presto's bytes exactly."""
        resized = [F.resize(pil(i), 256) for i in range(COUNT)]
        flips = boxes = 0
        for seed, epoch in ((0, 0), (0, 1), (5, 3)):
            _, images = pull(_daemon.sock, "train", seed=seed, epoch=epoch)
            for i in range(COUNT):
                w, h = resized[i].size
                top, left, ch, cw, _ = rrc_params(step_rng(seed, epoch, i, 2), h, w)
                ref = F.resized_crop(resized[i], top, left, ch, cw, [224, 224])
                if step_rng(seed, epoch, i, 3).rand01() < 0.5:
                    ref = F.hflip(ref)
                    flips += 1
                boxes += 1
                ref = np.asarray(ref)
                self.assertTrue(np.array_equal(images[i], ref),
                                "seed %d epoch %d sample %d: presto differs from "
                                "torchvision's resized_crop(%d, %d, %d, %d) in %d bytes (if "
                                "every sample differs, the replica of the seeds in "
                                "daemon/pipeline.c is out of date)" % (
                                    seed, epoch, i, top, left, ch, cw,
                                    int((images[i] != ref).sum())))
        print("\nrandom_resized_crop + random_flip: %d crops (%d flipped) bit-identical to "
              "torchvision's F.resized_crop + F.hflip with presto's draws" % (boxes, flips))

    def test_crop_distribution_matches_get_params(self):
        from torchvision.transforms import RandomResizedCrop
        n = 10000
        torch.manual_seed(0)
        for h, w in ((256, 341), (341, 256), (256, 256), (64, 512)):
            img = Image.new("L", (w, h))
            # The fallback's box (no draw fits a scale of 2): counted alike
            # in both, as torchvision does not say when it fell back.
            fallback = rrc_params(Rng(0), h, w, scale=(2, 2))[:4]
            ours, theirs = [], []
            fb_ours = fb_theirs = 0
            for k in range(n):
                top, left, ch, cw, _ = rrc_params(Rng(mix64(k + 1)), h, w)
                ours.append((ch * cw / (h * w), math.log(cw / ch)))
                fb_ours += (top, left, ch, cw) == fallback
                top, left, ch, cw = RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
                theirs.append((ch * cw / (h * w), math.log(cw / ch)))
                fb_theirs += (top, left, ch, cw) == fallback
            ours, theirs = np.array(ours), np.array(theirs)
            d_area = ks_statistic(ours[:, 0], theirs[:, 0])
            d_ratio = ks_statistic(ours[:, 1], theirs[:, 1])
            crit = 1.95 * math.sqrt(2.0 / n)  # alpha = 0.001
            print("\nrandom_resized_crop on %dx%d, %d draws each: area fraction mean %.4f "
                  "(torchvision %.4f), KS D %.4f; log ratio mean %.4f (%.4f), KS D %.4f; "
                  "fallbacks %d (%d); critical D %.4f" % (
                      w, h, n, ours[:, 0].mean(), theirs[:, 0].mean(), d_area,
                      ours[:, 1].mean(), theirs[:, 1].mean(), d_ratio, fb_ours, fb_theirs,
                      crit))
            self.assertLess(d_area, crit)
            self.assertLess(d_ratio, crit)
            # Fallback counts: binomial, 4.5 standard deviations.
            p = max(fb_theirs / n, 1.0 / n)
            self.assertLessEqual(abs(fb_ours - fb_theirs), 4.5 * math.sqrt(2 * n * p * (1 - p)) + 2)

    def test_same_bytes_whatever_workers_cache_ranks_order(self):
        def digests(labels, images):
            return collections.Counter((int(l), hashlib.sha1(x.tobytes()).hexdigest())
                                       for l, x in zip(labels, images))

        def stats(sock):
            with presto.Client(sock) as c:
                return {d["name"]: d for d in c.stats()["datasets"]}["repro"]

        cold = pull(_daemon.sock, "repro", seed=3, epoch=2)
        after_cold = stats(_daemon.sock)
        warm = pull(_daemon.sock, "repro", seed=3, epoch=2)
        after_warm = stats(_daemon.sock)
        one_worker = pull(_daemon1.sock, "repro", seed=3, epoch=2)
        self.assertEqual(cold[1].dtype, np.float32)
        self.assertEqual(after_cold["misses"], COUNT)
        self.assertEqual(after_warm["hits"] - after_cold["hits"], COUNT)
        for other in (warm, one_worker):
            np.testing.assert_array_equal(other[0], cold[0])
            self.assertTrue(np.array_equal(other[1], cold[1]))
        want = digests(*cold)
        ranks = [pull(_daemon.sock, "repro", seed=3, epoch=2, rank=r, world=2)
                 for r in (0, 1)]
        self.assertEqual(digests(*ranks[0]) + digests(*ranks[1]), want)
        shuffled = pull(_daemon1.sock, "repro", seed=3, epoch=2, shuffle=True, batch_size=5)
        self.assertEqual(digests(*shuffled), want)
        # Another epoch, another seed: other crops for (nearly) every sample.
        for kw in ({"seed": 3, "epoch": 3}, {"seed": 4, "epoch": 2}):
            _, images = pull(_daemon.sock, "repro", **kw)
            same = sum(np.array_equal(a, b) for a, b in zip(images, cold[1]))
            self.assertLessEqual(same, 1, kw)
        print("\nrandom steps: the same bytes with 1 and 2 workers, cold and warm cache, "
              "1 and 2 ranks, shuffled or not; other epochs and seeds differ")

    def test_flip_rate(self):
        _, plain = pull(_daemon.sock, "noflip")
        mirrored = plain[:, :, ::-1, :]
        for name, p in (("flip-50", 0.5), ("flip-25", 0.25)):
            flips = 0
            for epoch in range(FLIP_EPOCHS):
                _, images = pull(_daemon.sock, name, epoch=epoch, batch_size=COUNT)
                for i in range(COUNT):
                    if np.array_equal(images[i], mirrored[i]):
                        flips += 1
                    else:
                        self.assertTrue(np.array_equal(images[i], plain[i]),
                                        "%s: sample %d is neither the image nor its mirror"
                                        % (name, i))
            n = FLIP_EPOCHS * COUNT
            sd = math.sqrt(n * p * (1 - p))
            print("\n%s: %d flips in %d samples (rate %.3f, expected %.2f +- %.3f)"
                  % (name, flips, n, flips / n, p, sd / n))
            self.assertLessEqual(abs(flips - n * p), 4.5 * sd)


if __name__ == "__main__":
    unittest.main()
