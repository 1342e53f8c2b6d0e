"""The Python binding (client/python/presto) against a real prestod.

Run: /usr/bin/python3 -m unittest discover -s tests/python -v
(or tests/python/run.sh; see prestotest.py for the environment).
"""

import collections
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
import unittest
from unittest import mock

import numpy as np

import prestotest as pt
import presto

try:
    import torch
    from presto.torch import Loader
except ImportError:  # the torch tests skip
    torch = None

COUNT, CLASSES = 48, 3   # dataset size divisible by the 2 ranks of the tests
SIDE = 32                # the tiny pipeline's output: 32 x 32 x 3
CONFIG = pt.TINY_CONFIG

needs_torch = unittest.skipUnless(torch is not None, "torch is not importable")

_dir = _root = _daemon = None


def setUpModule():
    global _dir, _root, _daemon
    _dir, _root, _, _daemon = pt.serve(CONFIG, COUNT, CLASSES, 7, side=SIDE)


def tearDownModule():
    pt.finish(_dir, _daemon)


def pull(stream):
    """[(labels copy, images copy), ...] of a whole stream."""
    with stream:
        return [(b.labels.copy(), b.images.copy()) for b in stream]


def keys(batches):
    return [pt.sample_key(l, img) for labels, images in batches
            for l, img in zip(labels, images)]


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = presto.Client(_daemon.sock)
        self.addCleanup(self.client.close)

    def test_stats_and_datasets_are_parsed_json(self):
        stats = self.client.stats()
        self.assertEqual(stats["version"], presto.version())
        self.assertEqual(stats["pid"], _daemon.proc.pid)
        self.assertIn("cache", stats)
        ds = self.client.datasets()["datasets"]
        self.assertEqual([d["name"] for d in ds], ["tiny"])
        self.assertEqual(ds[0]["samples"], COUNT)
        self.assertEqual(ds[0]["classes"], CLASSES)
        self.assertEqual(ds[0]["shape"], [SIDE, SIDE, 3])
        # the sample model: what the pipeline's last step gives
        self.assertEqual(ds[0]["sample"], "uint8 image [H, W, C]")

    def test_numpy_batches(self):
        with self.client.stream("tiny", batch_size=10, seed=3) as s:
            self.assertEqual(len(s), 5)
            self.assertEqual(s.info[:5], (COUNT, 5, (SIDE, SIDE, 3), np.uint8, "nhwc"))
            want = os.environ.get("PRESTO_TRANSPORT") or "shm"
            self.assertEqual((s.info.transport, s.info.slots, s.info.prefetch),
                             (want, 8 if want == "shm" else 0, 8))
            sizes, labels = [], []
            for i, b in enumerate(s):
                self.assertEqual(b.index, i)
                self.assertEqual(b.images.dtype, np.uint8)
                self.assertEqual(b.images.shape, (len(b), SIDE, SIDE, 3))
                self.assertEqual(b.labels.dtype, np.int64)
                self.assertEqual(b.labels.shape, (len(b),))
                sizes.append(len(b))
                labels.extend(b.labels.tolist())
            self.assertEqual(sizes, [10, 10, 10, 10, 8])
            self.assertEqual(s.skipped, 0)
            self.assertIsNone(s.next_batch())  # stays at the end
        # mkdataset deals the images round-robin over the classes.
        self.assertEqual(collections.Counter(labels), {c: COUNT // CLASSES for c in range(CLASSES)})

    def test_drop_last_and_ranks(self):
        with self.client.stream("tiny", batch_size=10, drop_last=True) as s:
            self.assertEqual(len(s), 4)
            self.assertEqual(sum(len(b) for b in s), 40)
        with self.client.stream("tiny", batch_size=5, rank=1, world=2) as s:
            self.assertEqual((s.info.samples, len(s)), (24, 5))
            self.assertEqual(sum(len(b) for b in s), 24)

    def checksum(self, batch_size, epoch, seed, args, **kw):
        with self.client.stream("tiny", batch_size=batch_size, epoch=epoch, seed=seed,
                                **kw) as s:
            h, n, nb = pt.FNV_INIT, 0, 0
            for b in s:
                h = pt.fnv1a64(h, b.labels.astype("<i8"))
                h = pt.fnv1a64(h, b.images)
                n, nb = n + len(b), nb + 1
        rc, out, err = pt.prestoctl(_daemon.sock, "epoch", "tiny", "-b", str(batch_size),
                                    "-e", str(epoch), "--seed", str(seed), "--checksum",
                                    "--json", *args)
        self.assertEqual(rc, 0, err)
        ref = json.loads(out)
        self.assertEqual((ref["samples"], ref["batches"]), (n, nb))
        self.assertEqual(ref["checksum"], "%016x" % h)

    def test_images_equal_the_c_clients_bytes(self):
        self.checksum(10, 0, 0, [])
        self.checksum(7, 2, 5, [])
        self.checksum(8, 1, 9, ["--rank", "1", "--world", "2", "--drop-last"],
                      rank=1, world=2, drop_last=True)
        self.checksum(16, 3, 1, ["--no-shuffle"], shuffle=False)

    def test_views_are_zero_copy(self):
        with self.client.stream("tiny", batch_size=12) as s:
            b = next(s)
            images, labels = b.images, b.labels
            self.assertNotEqual(b.data_ptr, 0)
            self.assertEqual(images.ctypes.data, b.data_ptr)
            self.assertEqual(labels.ctypes.data, b.labels_ptr)
            self.assertEqual(images.nbytes, 12 * SIDE * SIDE * 3)
            self.assertTrue(images.flags.c_contiguous)
            # the same memory through any other route
            raw = (ctypes.c_ubyte * images.nbytes).from_address(b.data_ptr)
            self.assertTrue(np.shares_memory(images, np.frombuffer(raw, np.uint8)))
            self.assertTrue(np.shares_memory(b.images, images))
            if torch is not None:
                ti, tl = b.tensors()
                self.assertEqual(ti.data_ptr(), b.data_ptr)
                self.assertEqual(tl.data_ptr(), b.labels_ptr)
                self.assertTrue(torch.equal(ti, torch.from_numpy(images.copy())))
            # writes show through: it is one buffer
            images[0, 0, 0, 0] ^= 0xFF
            self.assertEqual(raw[0], images[0, 0, 0, 0])

    def test_release(self):
        with self.client.stream("tiny", batch_size=12) as s:
            first = next(s)
            self.assertFalse(first.released)
            first.release()
            first.release()  # idempotent
            self.assertTrue(first.released)
            with self.assertRaises(presto.PrestoError):
                first.images
            second = next(s)
            labels = second.labels.copy()
            next(s)  # the next batch leaves this one alone: it is released with its views
            self.assertFalse(second.released)
            np.testing.assert_array_equal(second.labels, labels)
            second.release()
            with self.assertRaises(presto.InvalidArgumentError):
                second.labels

    def test_copy_option_keeps_batches_valid(self):
        ref = pull(self.client.stream("tiny", batch_size=10, epoch=4))
        with self.client.stream("tiny", batch_size=10, epoch=4, copy=True) as s:
            kept = list(s)  # all kept past the next batch and past close
        self.assertEqual(len(kept), len(ref))
        for b, (labels, images) in zip(kept, ref):
            self.assertTrue(b.owned)
            self.assertFalse(b.released)
            b.release()  # nothing to hand back: still valid
            self.assertNotEqual(b.images.ctypes.data, b.data_ptr)
            np.testing.assert_array_equal(b.labels, labels)
            np.testing.assert_array_equal(b.images, images)

    def wait_connections(self, want):
        """Polls the daemon's connection gauge until it is want; returns the last."""
        deadline = time.monotonic() + 10 * pt.SLOWDOWN
        while True:
            n = self.client.stats()["connections"]
            if n == want or time.monotonic() > deadline:
                return n
            time.sleep(0.02)

    def test_views_outlive_a_closed_stream(self):
        # 2 batches of 24: a receive buffer of 128 KiB, which malloc maps, so a
        # use after free would fault rather than read stale bytes.
        s = self.client.stream("tiny", batch_size=24)
        b = next(s)
        images, ref = b.images, b.images.copy()
        s.close()
        del s, b
        gc.collect()
        # the stream stopped at once: its connection (and ring) are gone ...
        self.assertEqual(self.wait_connections(1), 1)
        self.assertEqual(self.client.stats()["streams"], 0)
        # ... and the view still holds its batch's bytes
        np.testing.assert_array_equal(images, ref)
        del images
        gc.collect()
        self.assertEqual(self.client.stats()["shm"]["rings"], 0)

    def test_unknown_dataset(self):
        with self.assertRaises(presto.PrestoError) as cm:
            self.client.stream("nope")
        e = cm.exception
        self.assertEqual(e.code, presto.E_NODATASET)
        self.assertEqual(str(e), "prestod: no dataset named 'nope'")
        self.assertEqual(e.name, presto.strerror(presto.E_NODATASET))
        self.assertIsInstance(e, presto.NoDatasetError)
        self.assertIsInstance(e, LookupError)
        # the connection is still usable
        self.assertEqual(self.client.datasets()["datasets"][0]["name"], "tiny")

    def test_invalid_arguments(self):
        for kw in ({"rank": 2, "world": 2}, {"batch_size": 0}, {"batch_size": -1},
                   {"world": 1 << 32}, {"epoch": -1}):
            with self.subTest(**kw), self.assertRaises(presto.InvalidArgumentError) as cm:
                self.client.stream("tiny", **kw)
            self.assertEqual(cm.exception.code, presto.E_INVAL)
            self.assertIsInstance(cm.exception, ValueError)
        with self.assertRaisesRegex(presto.PrestoError, "rank 2 is not below world size 2"):
            self.client.stream("tiny", rank=2, world=2)

    def test_threads_share_a_client(self):
        def run(rank, out):
            out[rank] = keys(pull(self.client.stream("tiny", batch_size=4, epoch=6,
                                                     rank=rank, world=2)))
            out[2 + rank] = self.client.stats()["pid"]

        out = [None] * 4
        threads = [threading.Thread(target=run, args=(r, out)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(out[2:], [_daemon.proc.pid] * 2)
        for rank in (0, 1):
            self.assertEqual(out[rank], keys(pull(self.client.stream(
                "tiny", batch_size=4, epoch=6, rank=rank, world=2))))

    def test_closed_client(self):
        c = presto.Client(_daemon.sock)
        with c:
            c.stats()
        c.close()  # twice is fine
        with self.assertRaises(presto.PrestoError):
            c.stats()

    def test_cannot_connect(self):
        path = os.path.join(_dir, "nobody.sock")
        with self.assertRaises(presto.PrestoError) as cm:
            presto.Client(path)
        self.assertEqual(cm.exception.code, presto.E_IO)
        self.assertIn(path, str(cm.exception))

    def test_default_socket(self):
        old = os.environ.get("PRESTO_SOCKET")
        os.environ["PRESTO_SOCKET"] = _daemon.sock
        try:
            self.assertEqual(presto.default_socket(), _daemon.sock)
            with presto.Client() as c:
                self.assertEqual(c.socket, _daemon.sock)
                self.assertEqual(c.stats()["pid"], _daemon.proc.pid)
        finally:
            if old is None:
                del os.environ["PRESTO_SOCKET"]
            else:
                os.environ["PRESTO_SOCKET"] = old


class SharedMemoryTest(unittest.TestCase):
    """The shared-memory transport from Python (the default unless
    PRESTO_TRANSPORT=socket; these tests ask for it explicitly)."""

    def setUp(self):
        self.client = presto.Client(_daemon.sock)
        self.addCleanup(self.client.close)

    def wait_stat(self, section, key, want, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            got = self.client.stats()[section][key]
            if got == want or time.monotonic() > deadline:
                self.assertEqual(got, want, "stats %s.%s" % (section, key))
                return
            time.sleep(0.02)

    def test_same_arrays_as_the_socket(self):
        shm = self.client.stream("tiny", batch_size=10, seed=4, transport="shm")
        self.assertEqual((shm.info.transport, shm.info.slots, shm.info.prefetch),
                         ("shm", 8, 8))
        sock = self.client.stream("tiny", batch_size=10, seed=4, transport="socket")
        # The socket has no ring; OPENED still says the prefetch granted.
        self.assertEqual((sock.info.transport, sock.info.slots, sock.info.prefetch),
                         ("socket", 0, 8))
        a, b = pull(shm), pull(sock)
        self.assertEqual(len(a), len(b))
        for (la, ia), (lb, ib) in zip(a, b):
            np.testing.assert_array_equal(la, lb)
            np.testing.assert_array_equal(ia, ib)
        with self.assertRaises(presto.InvalidArgumentError):
            self.client.stream("tiny", transport="carrier-pigeon")

    def test_killed_trainer_frees_its_ring(self):
        code = ("import sys, time; sys.path.insert(0, %r); import presto; "
                "s = presto.Client(%r).stream('tiny', batch_size=4, transport='shm'); "
                "b = next(s); print('ready', flush=True); time.sleep(60)"
                % (os.path.join(pt.SRC, "client", "python"), _daemon.sock))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 env=pt.PYTHON_CLIENT_ENV)
        try:
            self.assertEqual(child.stdout.readline().strip(), b"ready")
            self.assertGreaterEqual(self.client.stats()["shm"]["rings"], 1)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        self.wait_stat("shm", "rings", 0)
        self.wait_stat("shm", "ring_bytes", 0)
        self.assertEqual(len(keys(pull(self.client.stream("tiny", transport="shm")))), COUNT)

    def test_eight_streams_at_once(self):
        want = {seed: keys(pull(self.client.stream("tiny", batch_size=5, seed=seed)))
                for seed in range(8)}
        got, errors = {}, []

        def run(seed):
            try:
                with presto.Client(_daemon.sock) as c:
                    got[seed] = keys(pull(c.stream("tiny", batch_size=5, seed=seed,
                                                   transport="shm")))
            except Exception as e:  # reported below, in the main thread
                errors.append(e)

        threads = [threading.Thread(target=run, args=(seed,)) for seed in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(got, want)


class BudgetTest(unittest.TestCase):
    """A daemon whose client memory budget cannot hold the prefetch asked:
    the stream is granted a lower one (info.prefetch says it, on both
    transports) and delivers the same epoch."""

    def test_lower_prefetch_granted(self):
        dir = pt.tempdir()
        path = os.path.join(dir, "prestod.yaml")
        with open(path, "w") as f:
            f.write(CONFIG.format(root=json.dumps(_root), side=SIDE) +
                    "limits:\n  client_memory: 1MiB\n  user_memory: 256KiB\n")
        d = pt.Daemon(dir, ["-c", path], name="tight")
        try:
            with presto.Client(d.sock) as c:
                for transport in ("shm", "socket"):
                    s = c.stream("tiny", batch_size=2, seed=4, prefetch=64,
                                 transport=transport)
                    self.assertEqual(s.info.transport, transport)
                    self.assertGreaterEqual(s.info.prefetch, 2)
                    self.assertLess(s.info.prefetch, 64)
                    self.assertEqual(s.info.slots,
                                     s.info.prefetch if transport == "shm" else 0)
                    want = pull(self.client_stream(transport))
                    got = pull(s)
                    self.assertEqual(keys(got), keys(want))
                self.assertEqual(c.stats()["client_memory"]["lowered"], 2)
        finally:
            pt.finish(dir, d)

    def client_stream(self, transport):
        """The same stream from the module's daemon, with its default prefetch."""
        c = presto.Client(_daemon.sock)
        self.addCleanup(c.close)
        s = c.stream("tiny", batch_size=2, seed=4, transport=transport)
        self.assertEqual(s.info.prefetch, 8)
        return s


class DaemonDiesTest(unittest.TestCase):
    """A daemon killed mid-epoch: errors, not crashes."""

    def test_stream_after_the_daemon_is_killed(self):
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        # Full-size samples (the default pipeline: 224 x 224 x 3), so that the
        # epoch does not fit in the socket buffers when the daemon dies.
        root = pt.make_dataset(os.path.join(dir, "data"), 24, 2, seed=3)
        d = pt.Daemon(dir, ["-d", "big=" + root], name="doomed")
        self.addCleanup(d.kill)
        client = presto.Client(d.sock)
        self.addCleanup(client.close)
        s = client.stream("big", batch_size=2, prefetch=1)
        self.assertEqual(len(s), 12)
        first = next(s)
        self.assertEqual(first.images.shape, (2, 224, 224, 3))
        d.kill()
        with self.assertRaises(presto.PrestoError) as cm:
            for _ in s:
                pass
        self.assertEqual(cm.exception.code, presto.E_IO)
        self.assertIn("prestod", str(cm.exception))
        with self.assertRaises(presto.PrestoError) as cm:
            next(s)  # the failure repeats
        self.assertEqual(cm.exception.code, presto.E_IO)
        s.close()
        for call in (client.stats, lambda: client.stream("big")):
            with self.assertRaises(presto.PrestoError) as cm:
                call()
            self.assertEqual(cm.exception.code, presto.E_IO)


@needs_torch
class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.client = presto.Client(_daemon.sock)
        self.addCleanup(self.client.close)

    def loader(self, **kw):
        loader = Loader("tiny", socket=_daemon.sock, **kw)
        self.addCleanup(loader.close)
        return loader

    def test_tensors_equal_the_numpy_arrays(self):
        ref = pull(self.client.stream("tiny", batch_size=10, seed=2, epoch=0))
        loader = self.loader(batch_size=10, seed=2)
        self.assertEqual(len(loader), len(ref))
        got = 0
        for (images, labels), (ref_labels, ref_images) in zip(loader, ref):
            self.assertIsInstance(images, torch.Tensor)
            self.assertEqual(images.dtype, torch.uint8)
            self.assertEqual(labels.dtype, torch.int64)
            self.assertTrue(torch.equal(images, torch.from_numpy(ref_images)))
            self.assertTrue(torch.equal(labels, torch.from_numpy(ref_labels)))
            got += 1
        self.assertEqual(got, len(ref))

    def test_chw_view_and_numpy_output(self):
        ref = pull(self.client.stream("tiny", batch_size=16, epoch=0))
        for images, labels in self.loader(batch_size=16, channels_last_to_chw=True):
            self.assertEqual(tuple(images.shape), (16, 3, SIDE, SIDE))
            self.assertFalse(images.is_contiguous())  # a view, not a copy
            nhwc = images.permute(0, 2, 3, 1)
            self.assertTrue(nhwc.is_contiguous())
            self.assertTrue(torch.equal(nhwc, torch.from_numpy(ref[0][1])))
            break
        for images, labels in self.loader(batch_size=16, as_tensors=False,
                                          channels_last_to_chw=True):
            self.assertIsInstance(images, np.ndarray)
            self.assertEqual(images.shape, (16, 3, SIDE, SIDE))
            np.testing.assert_array_equal(images.transpose(0, 2, 3, 1), ref[0][1])
            np.testing.assert_array_equal(labels, ref[0][0])
            break

    def test_len_matches_the_stream(self):
        for kw in ({"batch_size": 10}, {"batch_size": 10, "drop_last": True},
                   {"batch_size": 7, "rank": 1, "world_size": 2},
                   {"batch_size": 5, "rank": 0, "world_size": 5, "drop_last": True}):
            with self.subTest(**kw):
                loader = self.loader(**kw)
                world = {"rank": kw.get("rank", 0), "world": kw.get("world_size", 1)}
                with self.client.stream("tiny", batch_size=kw["batch_size"],
                                        drop_last=kw.get("drop_last", False), **world) as s:
                    self.assertEqual(len(loader), len(s))
                    self.assertEqual(sum(1 for _ in loader), len(s))

    def test_two_ranks_see_each_sample_once_per_epoch(self):
        ranks = [self.loader(batch_size=5, seed=11, rank=r, world_size=2) for r in (0, 1)]
        orders = []
        for epoch in range(3):
            seen = []
            for loader in ranks:
                loader.set_epoch(epoch)
                n = 0
                for images, labels in loader:  # training-style: use before the next batch
                    seen.extend(pt.sample_key(l, img) for l, img in
                                zip(labels.numpy(), images.numpy()))
                    n += len(labels)
                self.assertEqual(n, COUNT // 2)
            whole = keys(pull(self.client.stream("tiny", batch_size=8, seed=11, epoch=epoch)))
            self.assertEqual(len(whole), COUNT)
            self.assertEqual(collections.Counter(seen), collections.Counter(whole))
            orders.append(whole)
        self.assertNotEqual(orders[0], orders[1])  # each epoch has its own order

    def test_epochs_without_set_epoch(self):
        def order(**kw):
            return [l for labels, images in pull(self.client.stream("tiny", batch_size=48, **kw))
                    for l in labels.tolist()]

        def loader_order(loader):
            return [l for images, labels in loader for l in labels.tolist()]

        loader = self.loader(batch_size=48)
        self.assertEqual(loader_order(loader), order(epoch=0))
        self.assertEqual(loader_order(loader), order(epoch=1))  # counts up by itself
        loader.set_epoch(5)
        self.assertEqual(loader_order(loader), order(epoch=5))
        self.assertEqual(loader_order(loader), order(epoch=5))  # stays until set_epoch
        self.assertEqual(loader.epoch, 5)

    def test_copy_tensors_stay_valid(self):
        kept = list(self.loader(batch_size=10, copy=True))
        ref = pull(self.client.stream("tiny", batch_size=10, epoch=0))
        self.assertEqual(len(kept), len(ref))
        for (images, labels), (ref_labels, ref_images) in zip(kept, ref):
            self.assertTrue(torch.equal(images, torch.from_numpy(ref_images)))
            self.assertTrue(torch.equal(labels, torch.from_numpy(ref_labels)))

    def test_rank_and_world(self):
        loader = self.loader()
        self.assertEqual((loader.rank, loader.world_size), (0, 1))
        with self.assertRaises(presto.InvalidArgumentError):
            self.loader(rank=2, world_size=2)
        dist = torch.distributed
        if not dist.is_available():
            return
        with mock.patch.object(dist, "is_initialized", return_value=True), \
                mock.patch.object(dist, "get_rank", return_value=1), \
                mock.patch.object(dist, "get_world_size", return_value=3):
            self.assertEqual((self.loader().rank, self.loader().world_size), (1, 3))
            self.assertEqual(self.loader(rank=0).rank, 0)  # arguments win
            self.assertEqual(self.loader(world_size=2).world_size, 2)

    def test_errors(self):
        loader = Loader("nope", socket=_daemon.sock, batch_size=4)
        self.addCleanup(loader.close)
        with self.assertRaisesRegex(presto.NoDatasetError, "no dataset named 'nope'"):
            iter(loader)
        with self.assertRaises(presto.NoDatasetError):
            len(loader)
        with self.assertRaises(presto.NoDatasetError):
            loader.dataset


if __name__ == "__main__":
    unittest.main()
