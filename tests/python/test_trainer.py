"""The trainer's side of the binding against a real prestod (issue 14):

- kept batches keep their bytes (list(loader), queues), a loop that keeps every
  batch completes with copies counted (client and daemon stats), and a loop
  that drops them stays zero-copy;
- resuming: state_dict/load_state_dict at several positions (start, middle,
  last batch, past the end), for every rank of a world, equals the tail of the
  uninterrupted epoch byte for byte; states of another batch size, world size,
  dataset or dataset version are refused;
- the DataLoader face: loader.dataset (len, classes), loader.sampler
  (set_epoch, len), batch_size, len(loader), a new iter() ending an open one,
  break + new epoch leaving no extra stream or ring on the daemon;
- the daemon going away: a restart between len() and stats() calls, SIGTERM
  mid-epoch on both transports (the daemon's message, not EBADF), SIGINT to a
  process blocked in next() (KeyboardInterrupt within 100 ms, nothing lost);
- pinned memory and device copies: nothing of CUDA is touched without it; with
  a fake cudart, each ring is registered once and unregistered before it is
  unmapped; the GPU fence and the one-ahead device copy do what they say;
- packaging: `pip install` of client/python (offline) gives an importable
  presto and `python3 -m presto stats`.

Tests that do not depend on the transport skip in the PRESTO_TRANSPORT=socket
run (tests/run-tests.sh runs this suite on both).
"""

import collections
import gc
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import unittest
from unittest import mock

import prestotest as pt
import presto

try:
    import torch
    import presto.torch as ptorch
    from presto.torch import Loader
except ImportError:
    torch = None

COUNT, CLASSES, SIDE, BATCH = 48, 3, 32, 4
NB = COUNT // BATCH  # batches of an epoch (world 1)
CONFIG = pt.TINY_CONFIG
SOCKET_RUN = os.environ.get("PRESTO_TRANSPORT") == "socket"

needs_torch = unittest.skipUnless(torch is not None, "torch is not importable")
once = unittest.skipIf(SOCKET_RUN, "does not depend on the transport: run once")

_dir = _root = _config = _daemon = None


def setUpModule():
    global _dir, _root, _config, _daemon
    _dir, _root, _config, _daemon = pt.serve(CONFIG, COUNT, CLASSES, 5, side=SIDE)


def tearDownModule():
    pt.finish(_dir, _daemon)


def clones(batches):
    return [(i.clone(), l.clone()) for i, l in batches]


def wait_for(fn, want, timeout=5.0):
    """Polls fn() until it returns want; returns the last value."""
    deadline = time.monotonic() + timeout * pt.SLOWDOWN
    while True:
        got = fn()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


class Base(unittest.TestCase):
    def setUp(self):
        self.client = presto.Client(_daemon.sock)
        self.addCleanup(self.client.close)
        self.shm = self.client.stream("tiny").info.transport == "shm"

    def loader(self, sock=None, **kw):
        loader = Loader("tiny", socket=sock or _daemon.sock, **kw)
        self.addCleanup(loader.close)
        return loader

    def assertSameBatches(self, got, want):
        self.assertEqual(len(got), len(want))
        for n, ((gi, gl), (wi, wl)) in enumerate(zip(got, want)):
            self.assertTrue(torch.equal(gi, wi), "batch %d: other images" % n)
            self.assertTrue(torch.equal(gl, wl), "batch %d: other labels" % n)

    def copies(self):
        return self.client.stats()["shm"]["copies"]


@needs_torch
class KeepBatchesTest(Base):
    def test_list_of_batches_holds_every_batch(self):
        want = list(self.loader(batch_size=BATCH, seed=3, copy=True))  # plain copies
        before = self.copies()
        kept = list(self.loader(batch_size=BATCH, seed=3))             # zero-copy views
        self.assertSameBatches(kept, want)
        # More batches than the ring has slots: the ones that found every other
        # slot held were copied, and the daemon counted them.
        if self.shm:
            self.assertGreater(self.copies(), before)
        # Kept batches survive later epochs on the same loader and rings.
        loader = self.loader(batch_size=BATCH, seed=3)
        for epoch in (1, 2):
            loader.set_epoch(epoch)
            for images, labels in loader:
                pass
        self.assertSameBatches(kept, want)
        # The Client API: Batch objects of a whole stream.
        with self.client.stream("tiny", batch_size=BATCH, seed=3) as s:
            batches = list(s)
            self.assertEqual(s.copies, NB - (s.info.slots - 1) if self.shm else 0)
        self.assertSameBatches([b.tensors() for b in batches], want)

    def test_held_everything_loop_completes(self):
        want = list(self.loader(batch_size=BATCH, seed=4, copy=True))
        before = self.copies()
        # A ring of 2 slots and a prefetch queue that keeps everything.
        queue = collections.deque()
        with self.client.stream("tiny", batch_size=BATCH, seed=4, prefetch=2) as s:
            for batch in s:
                queue.append(batch.tensors())
            copies = s.copies
        self.assertSameBatches(list(queue), want)
        if self.shm:
            self.assertEqual(copies, NB - 1)
            # those whose RELEASE reached the daemon before the stream's END
            self.assertGreaterEqual(self.copies() - before, NB - 2)
            self.assertEqual(self.client.stats()["shm"]["release_timeouts"], 0)
        else:
            self.assertEqual(copies, 0)

    def test_steady_loop_stays_zero_copy(self):
        before = self.copies()
        with self.client.stream("tiny", batch_size=BATCH, seed=5) as s:
            n = 0
            for batch in s:
                n += len(batch)  # uses the batch, then drops it for the next
            self.assertEqual((n, s.copies), (COUNT, 0))
        self.assertEqual(self.copies(), before)
        loader = self.loader(batch_size=BATCH)
        for images, labels in loader:
            images.sum()
        self.assertEqual(self.copies(), before)


@needs_torch
class ResumeTest(Base):
    def interrupted(self, k, **kw):
        """A loader's state after consuming k batches of epoch 2 (then broken off)."""
        loader = self.loader(batch_size=BATCH, seed=9, **kw)
        loader.set_epoch(2)
        if k == 0:
            return loader.state_dict()
        for n, _ in enumerate(loader, 1):
            if n == k:
                break
        return loader.state_dict()

    def test_resume_equals_the_tail(self):
        for world in (1, 2):
            nb = NB // world
            for rank in range(world):
                kw = {"rank": rank, "world_size": world}
                full = self.loader(batch_size=BATCH, seed=9, **kw)
                full.set_epoch(2)
                whole = clones(full)
                self.assertEqual(len(whole), nb)
                for k in (0, nb // 2, nb - 1, nb):
                    with self.subTest(world=world, rank=rank, k=k):
                        state = self.interrupted(k, **kw)
                        self.assertEqual((state["epoch"], state["batches"]), (2, k))
                        resumed = self.loader(batch_size=BATCH, seed=0, **kw)  # seed: the state's
                        resumed.load_state_dict(state)
                        loop_epoch = state["epoch"]
                        resumed.set_epoch(loop_epoch)  # the training loop's own call keeps it
                        self.assertSameBatches(clones(resumed), whole[k:])
                        self.assertEqual(resumed.state_dict()["batches"], nb)
                        self.assertSameBatches(clones(resumed), whole)  # the next pass: whole
                # past the end of the epoch: nothing
                state = self.interrupted(0, **kw)
                state["batches"] = nb + 3
                resumed = self.loader(batch_size=BATCH, **kw)
                resumed.load_state_dict(state)
                self.assertEqual(list(resumed), [])

    def test_state_after_an_epoch_and_set_epoch(self):
        loader = self.loader(batch_size=BATCH, seed=2)
        loader.set_epoch(4)
        for _ in loader:
            pass
        st = loader.state_dict()
        self.assertEqual((st["epoch"], st["batches"], st["seed"]), (4, NB, 2))
        self.assertEqual(st["samples"], COUNT)
        self.assertEqual(st["fingerprint"], self.client.dataset("tiny")["fingerprint"])
        loader.set_epoch(5)
        self.assertEqual((loader.state_dict()["epoch"], loader.state_dict()["batches"]), (5, 0))
        # a state of another rank of the same world is this rank's position
        other = self.interrupted(3, rank=1, world_size=2)
        mine = self.loader(batch_size=BATCH, rank=0, world_size=2)
        mine.load_state_dict(other)
        got = clones(mine)
        ref = self.loader(batch_size=BATCH, seed=9, rank=0, world_size=2)
        ref.set_epoch(2)
        self.assertSameBatches(got, clones(ref)[3:])

    @once
    def test_refused_states(self):
        state = self.interrupted(3)
        cases = [({"batch_size": BATCH * 2}, {}, "batch_size"),
                 ({"world_size": 2}, {}, "world_size"),
                 ({"shuffle": False}, {}, "shuffle"),
                 ({"drop_last": True}, {}, "drop_last"),
                 ({}, {"fingerprint": "0123456789abcdef"}, "changed since it was saved"),
                 ({}, {"version": 99}, "not a presto Loader state")]
        for kw, change, what in cases:
            with self.subTest(what=what):
                loader = self.loader(**dict({"batch_size": BATCH}, **kw))
                with self.assertRaisesRegex(presto.InvalidArgumentError, what):
                    loader.load_state_dict(dict(state, **change))
        other = Loader("other", socket=_daemon.sock, batch_size=BATCH)
        self.addCleanup(other.close)
        with self.assertRaisesRegex(presto.InvalidArgumentError, "dataset 'tiny'"):
            other.load_state_dict(state)

    @once
    def test_state_of_another_dataset_version_refused(self):
        # The same files, one of them touched (a new mtime), in a daemon of its own.
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        root = os.path.join(dir, "data")
        shutil.copytree(_root, root)
        config = os.path.join(dir, "prestod.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(root=json.dumps(root), side=SIDE))
        d = pt.Daemon(dir, ["-c", config], name="v1")
        self.addCleanup(d.kill)
        loader = self.loader(sock=d.sock, batch_size=BATCH)
        for n, _ in enumerate(loader, 1):
            if n == 2:
                break
        state = loader.state_dict()
        self.assertEqual(d.stop(), 0)
        victim = os.path.join(root, "class_00")
        victim = os.path.join(victim, sorted(os.listdir(victim))[0])
        os.utime(victim, (1, 1))
        d2 = pt.Daemon(dir, ["-c", config], name="v2")
        self.addCleanup(d2.kill)
        resumed = self.loader(sock=d2.sock, batch_size=BATCH)
        with self.assertRaisesRegex(presto.InvalidArgumentError, "changed since it was saved"):
            resumed.load_state_dict(state)
        self.assertEqual(d2.stop(), 0)


@needs_torch
class DataLoaderFaceTest(Base):
    def test_dataset_sampler_and_lengths(self):
        loader = self.loader(batch_size=5, rank=1, world_size=2)
        self.assertEqual(len(loader.dataset), COUNT)
        self.assertEqual(loader.dataset.classes, ["class_%02d" % c for c in range(CLASSES)])
        self.assertEqual(loader.dataset.class_to_idx["class_01"], 1)
        self.assertEqual(loader.batch_size, 5)
        self.assertEqual(len(loader.sampler), COUNT // 2)
        self.assertEqual(len(loader), 5)  # 24 samples in batches of 5
        self.assertEqual(loader.sampler.num_replicas, 2)
        with self.assertRaises(TypeError):
            loader.dataset[0]
        # `loss / len(loader.dataset)` and the DDP idiom
        loader.sampler.set_epoch(3)
        self.assertEqual(loader.epoch, 3)
        got = [l for _, labels in loader for l in labels.tolist()]
        ref = self.loader(batch_size=5, rank=1, world_size=2)
        ref.set_epoch(3)
        self.assertEqual(got, [l for _, labels in ref for l in labels.tolist()])

    def test_new_iter_ends_an_open_one(self):
        loader = self.loader(batch_size=BATCH)
        first = iter(loader)
        images, _ = next(first)
        keep = images.clone()
        second = iter(loader)
        with self.assertRaisesRegex(presto.InvalidArgumentError, "newer iter"):
            next(first)
        self.assertEqual(sum(1 for _ in second), NB)
        self.assertTrue(torch.equal(images, keep))  # its batch stays valid

    def test_break_then_new_epoch_leaves_no_extra_ring(self):
        loader = self.loader(batch_size=BATCH)
        for n, (images, labels) in enumerate(loader):
            if n == 2:
                break
        keep = images.clone()
        streams = lambda: self.client.stats()["streams"]
        self.assertEqual(wait_for(streams, 0), 0)  # the broken-off stream is gone
        for images2, labels2 in loader:
            rings = lambda: self.client.stats()["shm"]["rings"]
            self.assertEqual(wait_for(rings, 1 if self.shm else 0), 1 if self.shm else 0)
            self.assertEqual(streams(), 1)
            break
        self.assertTrue(torch.equal(images, keep))  # the loop's variables still hold it


class DaemonGoesAwayTest(unittest.TestCase):
    def start(self, dir, name, args=None):
        d = pt.Daemon(dir, args or ["-c", _config], name=name)
        self.addCleanup(d.kill)
        return d

    @needs_torch
    def test_restart_between_calls(self):
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        d = self.start(dir, "before")
        client = presto.Client(d.sock)
        self.addCleanup(client.close)
        loader = Loader("tiny", socket=d.sock, batch_size=BATCH)
        self.addCleanup(loader.close)
        self.assertEqual(len(loader), NB)
        self.assertEqual(sum(1 for _ in loader), NB)
        pid = client.stats()["pid"]
        self.assertEqual(d.stop(), 0)
        d2 = self.start(dir, "before")  # the same socket path
        self.assertEqual(len(loader), NB)
        self.assertEqual(client.stats()["pid"], d2.proc.pid)  # the first call reconnects
        self.assertNotEqual(pid, d2.proc.pid)
        self.assertEqual(len(loader.dataset), COUNT)
        self.assertEqual(sum(1 for _ in loader), NB)  # iteration too
        self.assertEqual(len(loader), NB)
        self.assertEqual(d2.stop(), 0)

    def test_sigterm_mid_epoch_says_why(self):
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        # Full-size samples (224 x 224 x 3) so the epoch cannot sit in buffers.
        root = pt.make_dataset(os.path.join(dir, "data"), 24, 2, seed=3)
        for transport in ("shm", "socket"):
            with self.subTest(transport=transport):
                d = self.start(dir, "term-" + transport, ["-d", "big=" + root])
                with presto.Client(d.sock) as client:
                    s = client.stream("big", batch_size=2, prefetch=1, transport=transport)
                    self.assertEqual(s.info.transport, transport)
                    first = next(s)
                    d.proc.send_signal(signal.SIGTERM)
                    with self.assertRaises(presto.PrestoError) as cm:
                        for _ in s:
                            pass
                    msg = str(cm.exception)
                    self.assertEqual(cm.exception.code, presto.E_IO, msg)
                    self.assertIn("prestod at %s closed the connection" % d.sock, msg)
                    self.assertNotIn("Bad file descriptor", msg)
                    self.assertEqual(first.images.shape, (2, 224, 224, 3))
                    s.close()
                self.assertEqual(d.proc.wait(10 * pt.SLOWDOWN), 0)

    @once
    def test_sigint_while_blocked_in_next(self):
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        d = self.start(dir, "stalled")
        self.addCleanup(lambda: d.proc.poll() is None and d.proc.send_signal(signal.SIGCONT))
        child_code = """
import sys, time
sys.path.insert(0, %r)
import presto
s = presto.Client(%r).stream("tiny", batch_size=%d, prefetch=1)
print("open", flush=True)
n = interrupted = 0
while True:
    try:
        for batch in s:
            n += 1
            print("batch", batch.index, flush=True)
        break
    except KeyboardInterrupt:
        interrupted += 1
        print("interrupted", flush=True)
print("done", n, interrupted, flush=True)
""" % (os.path.join(pt.SRC, "client", "python"), d.sock, BATCH)
        child = subprocess.Popen([sys.executable, "-c", child_code], stdout=subprocess.PIPE,
                                 env=pt.PYTHON_CLIENT_ENV)
        self.addCleanup(lambda: child.poll() is None and child.kill())
        self.addCleanup(child.stdout.close)
        out = Lines(child.stdout)
        self.assertEqual(out.get(30 * pt.SLOWDOWN), "open")
        d.proc.send_signal(signal.SIGSTOP)  # the daemon stalls: next() waits
        lines = []
        while True:  # what was sent already, until nothing comes for 0.5 s
            line = out.get(0.5)
            if line is None:
                break
            lines.append(line)
        self.assertLess(len(lines), NB, "the epoch ended before the daemon stopped")
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = out.get(5)
        latency = time.monotonic() - t0
        self.assertEqual(line, "interrupted", "no KeyboardInterrupt within 5 s")
        self.assertLess(latency, 0.1, "KeyboardInterrupt after %.3f s" % latency)
        d.proc.send_signal(signal.SIGCONT)
        rest = []
        while (line := out.get(10)) is not None:
            rest.append(line)
        self.assertEqual(child.wait(10), 0)
        self.assertIn("done %d 1" % NB, rest, "the stream lost batches: %r" % rest)


class Lines:
    """A child's stdout read line by line without buffering ahead, so that
    select() on it says whether a line is there."""

    def __init__(self, f):
        self.fd = f.fileno()
        self.buf = b""

    def get(self, timeout):
        """The next line, or None after timeout seconds without one."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


class FakeGpu:
    """A fake CUDA for the code that uses it: events complete when the test
    says (advance) or when waited for (synchronize)."""

    def __init__(self):
        self.now = 0
        self.events = []
        self.registered = {}   # base -> length
        self.log = []          # ("register"|"unregister", base, length)
        gpu = self

        class Event:
            def __init__(self, *a, **kw):
                self.at = None
                self.synced = False
                gpu.events.append(self)

            def record(self, stream=None):
                gpu.now += 1
                self.at = gpu.now

            def query(self):
                return self.at is not None and self.at <= gpu.done

            def synchronize(self):
                self.synced = True
                gpu.done = max(gpu.done, self.at or 0)

        class Cudart:
            def cudaHostRegister(self, base, length, flags):
                assert base not in gpu.registered, "registered twice"
                gpu.registered[base] = length
                gpu.log.append(("register", base, length))
                return 0

            def cudaHostUnregister(self, base):
                length = gpu.registered.pop(base)
                gpu.log.append(("unregister", base, length))
                return 0

        self.done = 0
        self.Event = Event
        self.cudart = Cudart()

    def advance(self):
        self.done = self.now


def forbid(name):
    def fail(*a, **kw):
        raise AssertionError("%s called without CUDA" % name)
    return fail


@needs_torch
class PinnedMemoryTest(Base):
    @once
    def test_import_costs_nothing(self):
        code = ("import sys; sys.path.insert(0, %r); import presto; "
                "assert 'torch' not in sys.modules, 'import presto imported torch'; print('ok')"
                % os.path.join(pt.SRC, "client", "python"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=pt.PYTHON_CLIENT_ENV, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ok"), r.stderr)
        # A Loader asks torch.cuda nothing until it iterates.
        with mock.patch.object(torch.cuda, "is_available", forbid("is_available")):
            Loader("tiny", socket=_daemon.sock, pin_memory=None).close()

    def test_without_cuda_nothing_is_touched(self):
        want = clones(self.loader(batch_size=BATCH, seed=6, copy=True))
        with mock.patch.object(torch.cuda, "is_available", return_value=False), \
                mock.patch.object(torch.cuda, "cudart", forbid("cudart")), \
                mock.patch.object(torch.cuda, "Stream", forbid("Stream")), \
                mock.patch.object(torch.cuda, "Event", forbid("Event")), \
                mock.patch.object(torch.Tensor, "pin_memory", forbid("pin_memory")), \
                mock.patch.object(presto, "set_ring_hooks", forbid("set_ring_hooks")):
            for kw in ({}, {"pin_memory": True}, {"device": "cuda"}, {"device": "cuda:0"}):
                with self.subTest(**kw):
                    loader = self.loader(batch_size=BATCH, seed=6, **kw)
                    if "device" in kw:  # said once, then the CPU's batches
                        with self.assertLogs("presto", "WARNING") as logs:
                            got = clones(loader)
                        self.assertIn("CUDA is not available", logs.output[0])
                    else:
                        got = clones(loader)
                    self.assertSameBatches(got, want)
                    self.assertEqual(got[0][0].device.type, "cpu")

    def test_rings_registered_once_with_a_fake_cudart(self):
        gpu = FakeGpu()
        want = clones(self.loader(batch_size=BATCH, seed=7, copy=True))

        def fake_pin(t):
            return t.clone()

        def cleanup():
            presto.set_ring_hooks(None, None)
            ptorch._hooks_on = False
            ptorch._pinned.clear()
        self.addCleanup(cleanup)
        with mock.patch.object(torch.cuda, "is_available", return_value=True), \
                mock.patch.object(torch.cuda, "cudart", return_value=gpu.cudart), \
                mock.patch.object(torch.cuda, "Event", gpu.Event), \
                mock.patch.object(torch.Tensor, "pin_memory", fake_pin):
            # A client of its own, so its rings are mapped after the hooks are in.
            loader = Loader("tiny", socket=_daemon.sock, batch_size=BATCH, seed=7)
            for _ in range(3):  # epoch 0 three times, as epoch after epoch would run
                loader.set_epoch(0)
                got = []
                for images, labels in loader:
                    got.append((images.clone(), labels.clone()))
                    if len(got) % 3 == 0:
                        gpu.advance()  # the GPU catches up now and then
                self.assertSameBatches(got, want)
            del images, labels
            gc.collect()
            registered = [e for e in gpu.log if e[0] == "register"]
            if self.shm:
                self.assertGreaterEqual(len(registered), 1)
                # a ring kept from epoch to epoch is registered once
                self.assertLessEqual(len(registered), 2)
                for _, base, length in registered:
                    self.assertGreater(length, 0)
            else:
                self.assertEqual(registered, [])
            loader.close()  # presto_close: the kept ring is unmapped
            gc.collect()
        self.assertEqual(gpu.registered, {}, "a ring was unmapped while registered")
        self.assertEqual(sorted(e[1:] for e in gpu.log if e[0] == "unregister"),
                         sorted(e[1:] for e in registered))
        self.assertTrue(all(e.synced or e.query() for e in gpu.events if e.at))

    @once
    def test_fence_waits_for_the_gpu(self):
        gpu = FakeGpu()
        released = []
        with mock.patch.object(torch.cuda, "Event", gpu.Event):
            fence = ptorch._GpuFence()
            fence.defer(lambda: released.append(1))
            fence.step()  # an event after the copy; the GPU is not there yet
            self.assertEqual(released, [])
            fence.step()
            self.assertEqual(released, [])
            gpu.advance()
            fence.step()
            self.assertEqual(released, [1])
            fence.defer(lambda: released.append(2))
            fence.close()  # the end of the iteration waits
            self.assertEqual(released, [1, 2])
            fence.defer(lambda: released.append(3))  # after it: waited for at once
            self.assertEqual(released, [1, 2, 3])
        self.assertTrue(all(e.synced or e.query() for e in gpu.events))

    @once
    def test_device_copy_runs_one_batch_ahead(self):
        gpu = FakeGpu()
        waited = []

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_event(self, event):
                waited.append(event)

        main = Stream()
        produced = []

        def host_batches():
            for i in range(5):
                produced.append(i)
                yield torch.full((2, 3), i), torch.tensor([i, i])

        recorded = []
        with mock.patch.object(torch.cuda, "Event", gpu.Event), \
                mock.patch.object(torch.cuda, "Stream", Stream), \
                mock.patch.object(torch.cuda, "stream", lambda s: mock.MagicMock()), \
                mock.patch.object(torch.cuda, "current_stream", lambda device=None: main), \
                mock.patch.object(torch.Tensor, "is_pinned", lambda t: True), \
                mock.patch.object(torch.Tensor, "record_stream",
                                  lambda t, s: recorded.append(s)):
            copier = ptorch._DeviceCopy(torch.device("cpu"))
            for i, (images, labels) in enumerate(copier.run(host_batches())):
                self.assertEqual(int(images[0, 0]), i)
                self.assertEqual(labels.tolist(), [i, i])
                # batch i+1 was fetched (and its copy queued) before i was handed out
                self.assertEqual(produced[-1], min(i + 1, 4))
                # the current stream waits for batch i's copy before using it
                self.assertIs(waited[-1], gpu.events[i])
        self.assertEqual(len(waited), 5)
        self.assertEqual(recorded, [main] * 10)  # images and labels, each batch
        self.assertTrue(all(e.synced for e in gpu.events),
                        "a batch's host memory went before its copy was known done")


@once
class PackagingTest(unittest.TestCase):
    def test_pip_install_and_python_m_presto(self):
        dir = pt.tempdir()
        self.addCleanup(pt.remove, dir)
        src = os.path.join(dir, "src")
        shutil.copytree(os.path.join(pt.SRC, "client", "python"), src,
                        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        site = os.path.join(dir, "site")
        r = subprocess.run([pt.PYTHON, "-m", "pip", "install", "--quiet", "--no-index",
                            "--no-build-isolation", "--no-deps", "--target", site, src],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 and "No module named pip" in r.stderr:
            self.skipTest("pip is not installed (python3-pip)")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(site, "presto", "__main__.py")))
        env = dict(pt.PYTHON_CLIENT_ENV, PYTHONPATH=site)
        run = lambda *args: subprocess.run([pt.PYTHON, "-m", "presto", "-s", _daemon.sock]
                                           + list(args), capture_output=True, text=True,
                                           cwd=dir, env=env, timeout=60)
        r = run("stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["pid"], _daemon.proc.pid)
        r = run("datasets")
        self.assertEqual([d["name"] for d in json.loads(r.stdout)["datasets"]], ["tiny"])
        r = run("epoch", "tiny", "-b", str(BATCH))
        self.assertEqual(json.loads(r.stdout)["samples"], COUNT, r.stderr)
        where = subprocess.run([pt.PYTHON, "-c", "import presto; print(presto.__file__)"],
                               capture_output=True, text=True, cwd=dir, env=env)
        self.assertTrue(where.stdout.startswith(site), where.stdout + where.stderr)
        r = subprocess.run([pt.PYTHON, "-m", "presto", "-s", os.path.join(dir, "none.sock"),
                            "stats"], capture_output=True, text=True, cwd=dir, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("presto: cannot connect to prestod", r.stderr)


if __name__ == "__main__":
    unittest.main()
