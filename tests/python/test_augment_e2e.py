"""The image augmentation steps end to end: what a real prestod serves for
pipelines naming them equals torchvision 0.14 on PIL given the same decisions.

A daemon serves one data set of real photos (tests/tools/mkdataset.py)
through several pipelines that share their offline part (decode, resize 56,
center_crop [40, 48], cached) and differ in the augmentation steps run online:
color_jitter with random_grayscale, random_rotation with random_affine,
gaussian_blur, auto_augment, rand_augment, trivial_augment_wide with normalize
and random_erasing (value random), to_float with random_erasing (values).

For each sample the suite asks the test hook (build/testlib/libsteps_hook.so)
for each online step's seed (the pipeline's: stream seed, epoch, sample id,
step index) and the decision drawn from it, then applies
torchvision.transforms.functional (and autoaugment's _apply_op) on a PIL image
of the offline part as the daemon served it (the "base" pipeline), step after
step, and compares: every byte where torchvision runs Pillow's integer code;
gaussian_blur within 1 on at most 0.1% of the values (a float32 convolution
summed in another order: tests/python/test_augment.py); the float tensors
within 1e-6 (normalize is exact; the erased values are equal).

Then the randomness: each pipeline's epoch is the same bytes from a daemon with
1 worker and one with 2, cold (offline steps computed) and warm (from the
cache), and each rank of world 2 gets world 1's samples; another epoch differs.
"""

import ctypes
import json
import os
import unittest

import numpy as np

import prestotest as pt

try:
    import torch
    from PIL import Image
    from torchvision.transforms import autoaugment as AA
    from torchvision.transforms import functional as F
    from torchvision.transforms import InterpolationMode
    import presto
except ImportError:  # the whole module skips
    torch = None

HOOK = os.path.join(pt.BUILD, "testlib", "libsteps_hook.so")
COUNT, CLASSES = 12, 3
SEED, EPOCH = 2024, 3
H, W = 40, 48
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
       "Invert"]
BASE = ["decode", {"resize": 56}, {"center_crop": [H, W]}]

# name -> the online steps, each (name, parameters as the config writes them)
PIPELINES = {
    "base": [],
    "jitter": [("color_jitter", {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4,
                                 "hue": 0.1}),
               ("random_grayscale", {"p": 0.5})],
    "geometry": [("random_rotation", {"degrees": 30, "interpolation": "bilinear",
                                      "fill": [10, 20, 30]}),
                 ("random_affine", {"degrees": [-15, 20], "translate": [0.1, 0.2],
                                    "scale": [0.8, 1.2], "shear": [-10, 10, -5, 5],
                                    "fill": 7})],
    "blur": [("gaussian_blur", {"kernel_size": [5, 3], "sigma": [0.1, 2.0]})],
    "auto": [("auto_augment", {})],
    "rand": [("rand_augment", {"num_ops": 3, "magnitude": 12, "interpolation": "bilinear",
                               "fill": [1, 2, 3]})],
    "trivial": [("trivial_augment_wide", {}),
                ("normalize", {"mean": MEAN, "std": STD, "layout": "nchw"}),
                ("random_erasing", {"p": 0.7, "value": "random"})],
    "erase": [("to_float", {}),
              ("random_erasing", {"p": 0.9, "scale": [0.05, 0.3], "value": [0.5, -1, 2]})],
}

# The cold path: random_resized_crop right after decode, both online (split
# 0: only the crop's region decoded), against decode cached (split 1: the
# crop cut from the full image). name -> (steps, split)
CROP = {"random_resized_crop": [H, W]}
ROI_PIPELINES = {
    "rrc-full": (["decode", CROP], 1),
    "rrc-region": (["decode", CROP], 0),
    "rrc-full-grey": ([{"decode": "grey"}, CROP, "random_flip"], 1),
    "rrc-region-grey": ([{"decode": "grey"}, CROP, "random_flip"], 0),
    "rrc-region-dct": ([{"decode": {"dct_scale": True}}, {"random_resized_crop": 16}], None),
    "rrc-full-16": (["decode", {"random_resized_crop": 16}], 1),
}

_lib = None
_dir = _daemon = _daemon1 = None
_base = None  # the base pipeline's images, by sample id
_cold = {}    # name -> the first epoch the 2-worker daemon served (cold)


def spec(params):
    """The hook's text of a step's parameters ("key=v;key=[a,b]")."""
    out = []
    for k, v in params.items():
        if isinstance(v, list):
            v = "[" + ",".join(str(x) for x in v) + "]"
        out.append("%s=%s" % (k, v))
    return ";".join(out).encode()


def setUpModule():
    global _lib, _dir, _daemon, _daemon1, _base, _cold
    if torch is None:
        raise unittest.SkipTest("torch, torchvision or PIL is not importable")
    if not os.path.exists(HOOK):
        raise unittest.SkipTest("no %s (run make tests)" % HOOK)
    if os.environ.get("PRESTO_TRANSPORT") == "socket":
        raise unittest.SkipTest("the transport is test_binding's: run once")
    _lib = ctypes.CDLL(HOOK)
    _lib.hook_step_seed.restype = ctypes.c_uint64
    _lib.hook_step_seed.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                    ctypes.c_uint32]
    _lib.hook_step_decide.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                                      ctypes.c_uint32, ctypes.c_uint32,
                                      ctypes.POINTER(ctypes.c_double), ctypes.c_char_p,
                                      ctypes.c_size_t]
    _lib.hook_step_apply.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64,
                                     ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                                     ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    _dir = pt.tempdir()
    root = pt.make_dataset(os.path.join(_dir, "data"), COUNT, CLASSES, seed=31, grey_every=5)
    ds = []
    for name, online in PIPELINES.items():
        steps = BASE + [{n: p} if p else n for n, p in online]
        ds.append({"name": name, "root": root, "steps": steps, "split": len(BASE)})
    for name, (steps, split) in ROI_PIPELINES.items():
        ds.append(dict({"name": name, "root": root, "steps": steps},
                       **({"split": split} if split is not None else {})))
    config = os.path.join(_dir, "prestod.yaml")
    with open(config, "w") as f:
        json.dump({"datasets": ds}, f, indent=1)  # JSON is YAML
    _daemon = pt.Daemon(_dir, ["-c", config])                              # 2 workers
    _daemon1 = pt.Daemon(_dir, ["-c", config, "-w", "1"], name="prestod1")
    _cold = {name: pull(_daemon.sock, name) for name in PIPELINES}
    _base = _cold["base"]


def tearDownModule():
    if _dir:
        pt.finish(_dir, _daemon, _daemon1)


def pull(sock, name, epoch=EPOCH, rank=0, world=1):
    """A whole unshuffled epoch's images (copies)."""
    images = []
    with presto.Client(sock) as c, c.stream(name, batch_size=5, seed=SEED, epoch=epoch,
                                            rank=rank, world=world, shuffle=False) as s:
        for b in s:
            images.append(np.array(b.images, copy=True))
    return np.concatenate(images)


def decide(name, params, i, index):
    seed = _lib.hook_step_seed(SEED, EPOCH, i, index)
    out = (ctypes.c_double * 32)()
    err = ctypes.create_string_buffer(256)
    rc = _lib.hook_step_decide(name.encode(), spec(params), seed, H, W, out, err, 256)
    assert rc == 0, err.value
    return list(out), seed


def erase_values(params, seed, shape, nchw):
    """The values random_erasing writes (value random), from the hook on zeros."""
    x = np.zeros(shape, dtype=np.float32)
    out = np.empty_like(x)
    err = ctypes.create_string_buffer(256)
    c = shape[0] if nchw else shape[2]
    rc = _lib.hook_step_apply(b"random_erasing", spec(params), seed, x.ctypes.data, H, W, c,
                              2, int(nchw), out.ctypes.data, err, 256)  # 2: float32
    assert rc == 0, err.value
    return torch.from_numpy(out if nchw else out.transpose(2, 0, 1).copy())


def reference(i, online):
    """torchvision on PIL, given presto's decisions, of sample i's base image."""
    img = Image.fromarray(_base[i])
    tensor = None
    nchw = True
    for k, (name, params) in enumerate(online):
        d, seed = decide(name, params, i, len(BASE) + k) if name not in (
            "normalize", "to_float") else (None, None)
        if name == "color_jitter":
            fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
            for f in d[0:4]:
                if d[8 + int(f)]:
                    img = fns[int(f)](img, d[4 + int(f)])
        elif name == "random_grayscale":
            if d[0]:
                img = F.rgb_to_grayscale(img, num_output_channels=3)
        elif name == "random_rotation":
            img = F.rotate(img, d[0], InterpolationMode.BILINEAR, fill=params["fill"])
        elif name == "random_affine":
            img = F.affine(img, d[0], [int(d[1]), int(d[2])], d[3], [d[4], d[5]],
                           InterpolationMode.NEAREST, fill=[params["fill"]] * 3)
        elif name == "gaussian_blur":
            img = F.gaussian_blur(img, params["kernel_size"], [d[0], d[0]])
        elif name in ("auto_augment", "rand_augment", "trivial_augment_wide"):
            mode = InterpolationMode.BILINEAR if params.get("interpolation") == "bilinear" \
                else InterpolationMode.NEAREST
            for j in range(int(d[0])):
                img = AA._apply_op(img, OPS[int(d[1 + 2 * j])], d[2 + 2 * j], mode,
                                   params.get("fill"))
        elif name == "normalize":
            tensor = F.normalize(F.to_tensor(img), params["mean"], params["std"])
        elif name == "to_float":
            tensor = F.to_tensor(img)
            nchw = False
        elif name == "random_erasing":
            top, left, h, w = (int(v) for v in d[0:4])
            if h:
                if params["value"] == "random":
                    v = erase_values(params, seed, tensor.shape if nchw else
                                     (H, W, 3), nchw)[:, top:top + h, left:left + w]
                else:
                    v = torch.tensor(params["value"], dtype=torch.float32)[:, None, None]
                tensor = F.erase(tensor, top, left, h, w, v)
        else:
            raise AssertionError(name)
    if tensor is not None:
        t = tensor.numpy()
        return t if nchw else t.transpose(1, 2, 0)
    return np.asarray(img)


class ServedTest(unittest.TestCase):
    def check(self, name, blur=False):
        got = _cold[name]
        self.assertEqual(len(got), COUNT)
        worst = 0
        if got.dtype == np.uint8:  # the steps did something to most samples
            changed = sum(not np.array_equal(got[i], _base[i]) for i in range(COUNT))
            self.assertGreaterEqual(changed, COUNT // 2, name)
        for i in range(COUNT):
            want = reference(i, PIPELINES[name])
            self.assertEqual(got[i].shape, want.shape, "%s sample %d" % (name, i))
            if want.dtype == np.float32:
                np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-6,
                                           err_msg="%s sample %d" % (name, i))
                continue
            diff = np.abs(got[i].astype(np.int16) - want.astype(np.int16))
            if blur:
                self.assertLessEqual(int(diff.max()), 1, "%s sample %d" % (name, i))
                worst = max(worst, int((diff > 0).sum()))
                self.assertLessEqual((diff > 0).mean(), 0.001, "%s sample %d" % (name, i))
            else:
                self.assertEqual(int(diff.max()), 0, "%s sample %d: %d values differ"
                                 % (name, i, int((diff > 0).sum())))
        print("\n%s: %d samples served as torchvision computes them%s" % (
            name, COUNT, " (blur: at most %d values off by 1)" % worst if blur else ""))

    def test_color_jitter_grayscale(self):
        self.check("jitter")

    def test_rotation_affine(self):
        self.check("geometry")

    def test_gaussian_blur(self):
        self.check("blur", blur=True)

    def test_auto_augment(self):
        self.check("auto")

    def test_rand_augment(self):
        self.check("rand")

    def test_trivial_augment_normalize_erasing_random(self):
        self.check("trivial")

    def test_to_float_erasing_values(self):
        self.check("erase")

    def test_decisions_vary(self):
        """The decisions cover the ops: over the data set, several ops and
        both a grayscale and not (otherwise the checks above prove little)."""
        ops, grey = set(), set()
        for i in range(COUNT):
            d, _ = decide("trivial_augment_wide", {}, i, len(BASE))
            ops.add(int(d[1]))
            d, _ = decide("random_grayscale", {"p": 0.5}, i, len(BASE) + 1)
            grey.add(int(d[0]))
        self.assertGreaterEqual(len(ops), 4)
        self.assertEqual(grey, {0, 1})


def computed(sock, name):
    """How many samples the daemon ran through name's offline steps."""
    with presto.Client(sock) as c:
        for d in c.stats()["datasets"]:
            if d["name"] == name:
                return d["computed"]
    raise AssertionError("no dataset %s in the stats" % name)


class RandomnessTest(unittest.TestCase):
    def test_workers_cache_ranks(self):
        """Every pipeline: 2 workers and 1, cold and warm, the same bytes; each
        rank of world 2 its share of world 1's; another epoch, other bytes."""
        for name in PIPELINES:
            if name == "base":
                continue
            want = _cold[name]                  # 2 workers, cold (setUpModule)
            runs = {"1 worker cold": pull(_daemon1.sock, name),
                    "1 worker warm": pull(_daemon1.sock, name),
                    "2 workers warm": pull(_daemon.sock, name)}
            # Each daemon ran the offline steps once per sample: the first
            # epoch each served was cold, the others came from the cache.
            self.assertEqual(computed(_daemon1.sock, name), COUNT, name)
            self.assertEqual(computed(_daemon.sock, name), COUNT, name)
            for what, got in runs.items():
                self.assertTrue(np.array_equal(got, want), "%s: %s differs" % (name, what))
            for rank in range(2):
                part = pull(_daemon.sock, name, rank=rank, world=2)
                self.assertTrue(np.array_equal(part, want[rank::2]),
                                "%s: rank %d of 2" % (name, rank))
            other = pull(_daemon.sock, name, epoch=EPOCH + 1)
            self.assertFalse(np.array_equal(other, want), "%s: two epochs alike" % name)


def region_decodes(sock):
    with presto.Client(sock) as c:
        return c.stats()["formats"]["jpeg"]["region"]


class ColdPathTest(unittest.TestCase):
    """random_resized_crop after decode, online: the crop's region alone is
    decoded (formats.jpeg.region counts it), and the bytes are the ones the
    crop cut from a fully decoded image gives."""

    def pair(self, full, region):
        before = region_decodes(_daemon.sock)
        got = pull(_daemon.sock, region)
        self.assertEqual(region_decodes(_daemon.sock) - before, COUNT, region)
        want = pull(_daemon.sock, full)
        self.assertEqual(got.shape, want.shape)
        return got, want

    def test_region_equals_full_decode(self):
        for full, region in (("rrc-full", "rrc-region"), ("rrc-full-grey", "rrc-region-grey")):
            got, want = self.pair(full, region)
            self.assertTrue(np.array_equal(got, want), region)
        print("\nregion decoding: %d RGB and %d grey crops equal full decode's" % (COUNT, COUNT))

    def test_region_at_dct_scale(self):
        got, want = self.pair("rrc-full-16", "rrc-region-dct")
        mse = float(((got.astype(np.float64) - want) ** 2).mean())
        psnr = 10 * np.log10(255.0 ** 2 / mse) if mse else float("inf")
        print("\nregion decoding at the DCT scale: PSNR %.1f dB against full decode" % psnr)
        self.assertGreater(psnr, 28.0)
        self.assertFalse(np.array_equal(got, want))  # a scale was used

    def test_region_when_no_tier_stores(self):
        """decode cached, random_resized_crop online: a sample that misses and
        that no tier would store (no disk tier; memory admitting none, or
        some) is decoded only where its crop cuts it (the dataset's
        region_unstored and formats.jpeg.region count it), and delivers the
        bytes of the full decode's path."""
        want = pull(_daemon.sock, "rrc-full")  # all cached: full decodes
        config = os.path.join(_dir, "unstored.yaml")
        steps, split = ROI_PIPELINES["rrc-full"]
        with open(config, "w") as f:
            json.dump({"datasets": [{"name": "rrc-full", "root": os.path.join(_dir, "data"),
                                     "steps": steps, "split": split}]}, f)
        # 64 bytes: less than the tier's index, memory admits nothing; 96KiB:
        # a few of the dataset's decoded photos (48-96 pixels a side).
        for memory, some in (("64", False), ("96KiB", True)):
            d = pt.Daemon(_dir, ["-c", config, "-m", memory], name="prestod-unstored")
            try:
                for epoch in (1, 2):  # cold, then what memory kept
                    region = region_decodes(d.sock)
                    got = pull(d.sock, "rrc-full")
                    with presto.Client(d.sock) as c:
                        st = c.stats()
                    ds = [x for x in st["datasets"] if x["name"] == "rrc-full"][0]
                    entries = ds["memory"]["entries"]
                    self.assertTrue(np.array_equal(got, want), "memory %s" % memory)
                    unstored = ds["region_unstored"]
                    if epoch == 1:
                        first = unstored
                        # each sample: decoded whole for the tiers, or not stored
                        self.assertEqual(ds["computed"] + unstored, COUNT, memory)
                        self.assertEqual(st["formats"]["jpeg"]["region"] - region, unstored)
                    else:
                        self.assertEqual(st["formats"]["jpeg"]["region"] - region,
                                         unstored - first)
                self.assertGreater(first, 0, memory)
                self.assertEqual(entries > 0, some, "memory %s: %d entries" % (memory, entries))
                if not some:
                    self.assertEqual(first, COUNT)
                    self.assertEqual(unstored, 2 * COUNT)
                print("\nmemory %s: %d entries; %d of %d samples region-decoded in the cold "
                      "epoch, %d in the next, equal to full decode's" %
                      (memory, entries, first, COUNT, unstored - first))
            finally:
                d.stop()


if __name__ == "__main__":
    unittest.main()
