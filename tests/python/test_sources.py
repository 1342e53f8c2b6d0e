"""Sources against torchvision: an ImageFolder of mixed image files (JPEG,
PNG 8/16-bit, palette and upper-case .PNG, WebP lossless, BMP, PPM, PGM,
TIFF, plus a .gif and a .txt torchvision leaves out; tests/tools/
mksources.py) gets the same sample list, labels and tensors from presto as
from torchvision's ImageFolder:

- the sample list and labels: presto's unshuffled epoch in order equals
  ImageFolder(root).samples (every extension, case-insensitive, sorted);
- decode (RGB and grey) through a center_crop that holds every image whole:
  bit-identical to PIL's convert('RGB' | 'L') (torchvision's loader), so the
  lossless formats match to the byte;
- Resize + CenterCrop: equal to torchvision's transforms on those images;
- the CSV and JSONL manifests and the tar shards of the same files give the
  same tensors as the folder.

Run: tests/python/run.sh -k sources
"""

import json
import os
import subprocess
import unittest

import numpy as np

import prestotest as pt
import presto

try:
    import torch  # noqa: F401
    from PIL import Image
    from torchvision import datasets as tv_datasets
    from torchvision.transforms import functional as F
except ImportError:
    torch = None

COUNT, CLASSES = 30, 3
MAX_SIDE = 150
CANVAS = MAX_SIDE
BATCH = 8

_dir = _out = _daemon = None
_samples = []


def setUpModule():
    global _dir, _out, _daemon, _samples
    if torch is None:
        raise unittest.SkipTest("torch, torchvision or PIL is not importable")
    _dir = pt.tempdir()
    src = pt.make_dataset(os.path.join(_dir, "jpg"), COUNT, CLASSES, seed=5, min_side=60,
                          max_side=MAX_SIDE, grey_every=5)
    _out = os.path.join(_dir, "sources")
    subprocess.run([pt.PYTHON, os.path.join(pt.SRC, "tests", "tools", "mksources.py"), src,
                    _out], check=True, stdout=subprocess.DEVNULL)
    folder = os.path.join(_out, "folder")
    _samples = tv_datasets.ImageFolder(folder).samples
    decode = ["decode", {"center_crop": CANVAS}]
    grey = [{"decode": "grey"}, {"center_crop": CANVAS}]
    evals = ["decode", {"resize": 64}, {"center_crop": 64}]
    roots = {"folder": folder, "csv": os.path.join(_out, "list.csv"),
             "jsonl": os.path.join(_out, "list.jsonl"),
             "tar": os.path.join(_out, "shards", "train-{000000..000002}.tar")}
    ds = []
    for kind, root in roots.items():
        ds.append({"name": kind + "-decode", "root": root, "steps": decode})
        ds.append({"name": kind + "-eval", "root": root, "steps": evals})
    ds.append({"name": "folder-grey", "root": folder, "steps": grey})
    config = os.path.join(_dir, "prestod.yaml")
    with open(config, "w") as f:
        json.dump({"datasets": ds}, f, indent=1)
    _daemon = pt.Daemon(_dir, ["-c", config, "-m", "128MiB"])


def tearDownModule():
    if _dir:
        pt.finish(_dir, _daemon)


def pull(name):
    labels, images = [], []
    with presto.Client(_daemon.sock) as c, c.stream(name, batch_size=BATCH,
                                                    shuffle=False) as s:
        for b in s:
            labels.append(b.labels.copy())
            images.append(b.images.copy())
        skipped = s.skipped
    if skipped:
        raise AssertionError("%s: %d samples skipped:\n%s" % (name, skipped, _daemon.log_text()))
    return np.concatenate(labels), np.concatenate(images)


def pil(i, mode):
    with Image.open(_samples[i][0]) as im:
        return im.convert(mode)


class FolderTest(unittest.TestCase):
    def test_every_extension_listed(self):
        exts = {os.path.splitext(p)[1] for p, _ in _samples}
        self.assertTrue({".jpg", ".png", ".PNG", ".webp", ".bmp", ".ppm", ".pgm", ".tif",
                         ".tiff"} <= exts, exts)
        self.assertEqual(len(_samples), COUNT)

    def test_labels_in_imagefolder_order(self):
        labels, _ = pull("folder-eval")
        self.assertEqual(labels.tolist(), [c for _, c in _samples])

    def test_decode_bit_identical(self):
        _, got = pull("folder-decode")
        for i in range(COUNT):
            want = np.asarray(F.center_crop(pil(i, "RGB"), CANVAS))
            np.testing.assert_array_equal(got[i], want, err_msg=_samples[i][0])

    def test_decode_grey_bit_identical(self):
        _, got = pull("folder-grey")
        for i in range(COUNT):
            want = np.asarray(F.center_crop(pil(i, "L"), CANVAS))
            np.testing.assert_array_equal(got[i].reshape(want.shape), want,
                                          err_msg=_samples[i][0])

    def test_resize_crop_as_torchvision(self):
        _, got = pull("folder-eval")
        for i in range(COUNT):
            want = np.asarray(F.center_crop(F.resize(pil(i, "RGB"), 64), 64))
            d = np.abs(got[i].astype(int) - want.astype(int))
            self.assertLessEqual(d.mean(), 0.5, _samples[i][0])
            self.assertLessEqual(d.max(), 3, _samples[i][0])


class OtherSourcesTest(unittest.TestCase):
    def test_same_tensors_as_the_folder(self):
        for pipe in ("decode", "eval"):
            ref_labels, ref = pull("folder-" + pipe)
            for kind in ("csv", "jsonl", "tar"):
                labels, got = pull("%s-%s" % (kind, pipe))
                self.assertEqual(labels.tolist(), ref_labels.tolist(), kind)
                np.testing.assert_array_equal(got, ref, err_msg="%s-%s" % (kind, pipe))


if __name__ == "__main__":
    unittest.main()
