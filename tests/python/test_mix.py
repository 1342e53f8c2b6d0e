"""mixup and cutmix served by a real prestod, against torchvision's reference
training scripts (tests/tools/tvmix.py: RandomMixup, RandomCutmix and the
RandomChoice of the two in the collate function).

One daemon serves the same photos as:
  plain   decode, resize, center_crop, to_float (nchw): the unmixed batches
  mixed   the same, then mixup 0.2 and cutmix 1.0 (num_classes 7)
  nhwc    normalize (nhwc), then cutmix alone with p 0.5
and for every batch of an epoch (on the socket and through shared memory,
world 1 and rank 1 of 2, a short last batch included) the test recomputes
the daemon's documented decision (hash_batch_seed of (seed, epoch, index *
world + rank), drawn by mix_draw through the steps hook), applies the
reference code with that decision to the plain batch, and wants the mixed
batch and its float32 [n, 7] soft targets bit for bit.

Then the decisions over many batches (the seeds the daemon uses for batches
0..N-1) against torchvision's own sampling in the reference collate function
(kind: chi-square; lambda, box area: Kolmogorov-Smirnov), the fingerprint
(mixup's parameters are in it), an OPEN from a client that cannot take soft
labels (refused, saying why; the plain dataset still streams to it), and the
start-up refusal of num_classes below the dataset's classes.
"""

import ctypes
import os
import random
import socket
import struct
import subprocess
import unittest

import numpy as np

import prestotest as pt
import presto

try:
    import torch
    import test_augment as ta
except ImportError:  # the module skips
    torch = None

CLASSES = 7
SIDE = 32
SEED = 5
CONFIG = """\
datasets:
  - name: plain
    root: {root}
    steps: [decode, {{resize: 40}}, {{center_crop: {side}}}, {{to_float: nchw}}]
  - name: mixed
    root: {root}
    steps:
      - decode
      - resize: 40
      - center_crop: {side}
      - to_float: nchw
      - mixup: {{alpha: 0.2, num_classes: {k}}}
      - cutmix: {{alpha: 1.0, num_classes: {k}}}
  - name: plain_nhwc
    root: {root}
    steps: [decode, {{resize: 40}}, {{center_crop: {side}}},
            {{normalize: {{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}}}]
  - name: nhwc
    root: {root}
    steps: [decode, {{resize: 40}}, {{center_crop: {side}}},
            {{normalize: {{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}}},
            {{cutmix: {{alpha: 1.0, num_classes: {k2}, p: 0.5}}}}]
"""
M64 = (1 << 64) - 1
BATCH_SALT = 0x6261746368736565


def mix64(x):
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def batch_seed(seed, epoch, number):
    """daemon/hash.c's hash_batch_seed."""
    return mix64(mix64(mix64(seed ^ BATCH_SALT) ^ epoch) ^ number)


def decision(params, seed, epoch, number):
    """(kind, lambda, box) the daemon draws for a batch: mix_draw through the
    steps hook, from the batch's seed."""
    d = np.zeros(6)
    ta._lib.hook_mix_draw(ta.ptr(ta.dvec(*params), ta.f64p), batch_seed(seed, epoch, number),
                          SIDE, SIDE, ta.ptr(d, ta.f64p))
    return int(d[0]), float(d[1]), tuple(int(v) for v in d[2:])


def reference(kind, lam, box, x, labels, k):
    """tvmix (the reference scripts' code) with the given decision on an
    NCHW float batch."""
    import tvmix
    if kind == 1:
        return tvmix.Mixup(k)(x, labels, lam=lam)
    if kind == 2:
        return tvmix.Cutmix(k)(x, labels, box=box)
    return x.clone(), torch.nn.functional.one_hot(labels, k).to(torch.float32)


_dir = _daemon = _root = None


def setUpModule():
    global _dir, _daemon, _root
    if torch is None:
        raise unittest.SkipTest("torch is not importable")
    if not os.path.exists(ta.HOOK):
        raise unittest.SkipTest("no %s (run make tests)" % ta.HOOK)
    ta._lib = ctypes.CDLL(ta.HOOK)
    ta._declare(ta._lib)
    _dir, _root, _, _daemon = pt.serve(CONFIG, 45, 6, 3, side=SIDE, k=CLASSES, k2=6)


def tearDownModule():
    if _daemon is not None:
        pt.finish(_dir, _daemon)


def epoch(name, transport, batch_size=8, rank=0, world=1, ep=1):
    """Every batch of an epoch as (index, images, labels) tensors (copies),
    and the stream's info."""
    out = []
    with presto.Client(_daemon.sock) as c:
        with c.stream(name, batch_size=batch_size, seed=SEED, epoch=ep, rank=rank, world=world,
                      transport=transport) as s:
            info = s.info
            for b in s:
                images, labels = b.tensors()
                out.append((b.index, images.clone(), labels.clone()))
                del b, images, labels
    return info, out


class MixServedTest(unittest.TestCase):

    def check_epoch(self, mixed, plain, params, k, transport, nhwc=False, **kw):
        info, got = epoch(mixed, transport, **kw)
        _, want = epoch(plain, transport, **kw)
        self.assertEqual(info.label_dtype, np.dtype(np.float32))
        self.assertEqual(info.label_shape, (k,))
        self.assertEqual(len(got), len(want))
        self.assertLess(got[-1][2].shape[0], kw.get("batch_size", 8))  # a short last one
        world, rank = kw.get("world", 1), kw.get("rank", 0)
        kinds = set()
        for (i, x, t), (j, px, pl) in zip(got, want):
            self.assertEqual(i, j)
            self.assertEqual(t.dtype, torch.float32)
            self.assertEqual(tuple(t.shape), (px.shape[0], k))
            kind, lam, box = decision(params, SEED, kw.get("ep", 1), i * world + rank)
            kinds.add(kind)
            src = px.permute(0, 3, 1, 2) if nhwc else px
            wx, wt = reference(kind, lam, box, src, pl, k)
            if nhwc:
                wx = wx.permute(0, 2, 3, 1)
            self.assertTrue(torch.equal(x, wx.contiguous()),
                            "batch %d (kind %d, lambda %r, box %r): pixels differ by %g"
                            % (i, kind, lam, box, float((x - wx).abs().max())))
            self.assertTrue(torch.equal(t, wt), "batch %d: soft targets %r != %r" % (i, t, wt))
            self.assertTrue(torch.allclose(t.sum(1), torch.ones(t.shape[0])))
        return kinds

    def test_mixup_cutmix_equal_reference(self):
        for transport in ("socket", "shm"):
            with self.subTest(transport=transport):
                kinds = self.check_epoch("mixed", "plain", (0.2, 1.0, 1.0, 0.5), CLASSES,
                                         transport)
                kinds |= self.check_epoch("mixed", "plain", (0.2, 1.0, 1.0, 0.5), CLASSES,
                                          transport, rank=1, world=2, batch_size=4, ep=2)
                self.assertEqual(kinds, {1, 2})  # both kinds were exercised

    def test_cutmix_nhwc_p(self):
        kinds = set()
        for ep in (1, 2, 3):
            kinds |= self.check_epoch("nhwc", "plain_nhwc", (0.0, 1.0, 0.5, 0.5), 6, "shm",
                                      nhwc=True, batch_size=4, ep=ep)
        self.assertEqual(kinds, {0, 2})  # p 0.5: some batches untouched

    def test_same_whatever_transport_and_cache(self):
        """The same bytes on both transports and on a second epoch read from
        the cache (the first computed it)."""
        a = epoch("mixed", "socket", ep=4)[1]
        b = epoch("mixed", "shm", ep=4)[1]
        for (i, x, t), (j, y, u) in zip(a, b):
            self.assertTrue(i == j and torch.equal(x, y) and torch.equal(t, u))

    def test_decisions_match_torchvision_sampling(self):
        """The decisions of the daemon's batches 0..N-1 (mix_draw from
        hash_batch_seed) against the reference collate function's."""
        import tvmix
        n = 3000
        ours = [decision((0.2, 1.0, 1.0, 0.5), SEED, 1, b) for b in range(n)]
        h = w = SIDE
        batch = torch.stack([torch.zeros(1, h, w), torch.ones(1, h, w)])
        labels = torch.tensor([0, 1])
        mixers = [tvmix.Mixup(2, p=1.0, alpha=0.2), tvmix.Cutmix(2, p=1.0, alpha=1.0)]
        torch.manual_seed(23)
        random.seed(23)
        theirs = []
        for _ in range(n):
            m = random.choices(mixers)[0]  # RandomChoice, as train.py's collate_fn
            out, t = m(batch, labels)
            if isinstance(m, tvmix.Cutmix):
                theirs.append((2, float(t[0, 0]), int((out[0, 0] == 1).sum()) / (h * w)))
            else:
                theirs.append((1, float(t[0, 0]), None))
        ours = [(k, lam, (b[2] - b[0]) * (b[3] - b[1]) / (h * w) if k == 2 else None)
                for k, lam, b in ours]
        stat, df, p = ta.chi2_two_sample(ta.collections.Counter(k for k, _, _ in ours),
                                         ta.collections.Counter(k for k, _, _ in theirs))
        self.assertGreater(p, ta.P_MIN, "kind: chi-square %.1f, p %.4f" % (stat, p))
        for what, kind, col in (("mixup lambda", 1, 1), ("cutmix lambda", 2, 1),
                                ("cutmix box area", 2, 2)):
            d, p = ta.ks_two_sample([x[col] for x in ours if x[0] == kind],
                                    [x[col] for x in theirs if x[0] == kind])
            self.assertGreater(p, ta.P_MIN, "%s: KS D %.4f, p %.4f" % (what, d, p))

    def test_fingerprint_and_datasets(self):
        with presto.Client(_daemon.sock) as c:
            plain, mixed = c.dataset("plain"), c.dataset("mixed")
        self.assertNotEqual(plain["fingerprint"], mixed["fingerprint"])

    def raw_open(self, name):
        """An OPEN from a client that never heard of label tensors (no
        PROTO_OPEN_LABELS): the first reply frame's type and body."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(_daemon.sock)
            n = name.encode()
            body = (struct.pack("<I", len(n)) + n + struct.pack("<IQQIIII", 4, 0, 0, 0, 1, 0, 0))
            s.sendall(struct.pack("<IHHIII", 0x54535250, 1, 6, 0, 9, len(body)) + body)
            hdr = b""
            while len(hdr) < 20:
                hdr += s.recv(20 - len(hdr))
            ftype, blen = struct.unpack_from("<H", hdr, 6)[0], struct.unpack_from("<I", hdr, 16)[0]
            rest = b""
            while len(rest) < blen:
                rest += s.recv(blen - len(rest))
            return ftype, rest

    def test_old_client(self):
        ftype, body = self.raw_open("mixed")
        self.assertEqual(ftype, 1)  # ERROR
        code, mlen = struct.unpack_from("<II", body)
        msg = body[8:8 + mlen].decode()
        self.assertEqual(code, 5, msg)  # PROTO_E_INVAL
        self.assertIn("float32 [n, 7] soft labels", msg)
        self.assertIn("newer libprestoclient", msg)
        ftype, body = self.raw_open("plain")  # int64 labels: as before
        self.assertEqual(ftype, 7)  # OPENED, without the label fields
        self.assertEqual(len(body), 56)

    def test_num_classes_below_the_datasets(self):
        path = os.path.join(_dir, "few.yaml")
        with open(path, "w") as f:
            f.write("datasets:\n  - name: few\n    root: %s\n    steps:\n      - decode\n"
                    "      - center_crop: 16\n      - to_float\n"
                    "      - mixup: {alpha: 0.2, num_classes: 4}\n" % _root)
        r = subprocess.run([os.path.join(pt.BUILD, "prestod"), "-c", path, "-s",
                            os.path.join(_dir, "few.sock"), "--cache-dir",
                            os.path.join(_dir, "few.cache")],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60 * pt.SLOWDOWN)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode()
        self.assertIn("steps.mixup.num_classes (line 8) is 4", err)
        self.assertIn("has 6 classes", err)


if __name__ == "__main__":
    unittest.main()
