"""presto.torch: an iterable that drops in where a torch DataLoader is used.

    from presto.torch import Loader

    loader = Loader("imagenet", batch_size=64, seed=0)  # rank/world from torch.distributed
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)                  # as with DistributedSampler
        for images, labels in loader:                    # uint8 NHWC, int64 (float32
            ...                                          # [n, K] after mixup/cutmix)
            ...

Epochs: after set_epoch(e), every iter() streams epoch e until the next
set_epoch (DistributedSampler semantics). If set_epoch was never called,
successive iter() calls stream epochs 0, 1, 2, ... (a fresh shuffle per pass,
as a DataLoader with shuffle=True gives).

Batches are tensors over the batch's own memory (see the presto module's
lifetime rule): they may be kept, put in lists or queues, and keep their
bytes; a loop that drops each batch before the next stays zero-copy.

What training code touches on a DataLoader is here: loader.dataset (len() is
the dataset's sample count, .classes its class names), loader.sampler
(set_epoch, len() the samples per rank), loader.batch_size, len(loader)
(batches per rank), state_dict() / load_state_dict() to resume an epoch where
it was interrupted, pin_memory and device for the GPU.
"""

import collections
import logging
import threading

import torch

import presto

_log = logging.getLogger("presto")
STATE_VERSION = 1


def _distributed():
    """(rank, world) of an initialized torch.distributed, else None."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _cuda_available():
    """torch.cuda.is_available(), asked only where CUDA is wanted."""
    return torch.cuda.is_available()


# ---- pinned memory: every ring registered with CUDA once ----

_pinned = {}  # base -> length of the rings registered by this process


def _register_ring(base, length):
    rc = int(torch.cuda.cudart().cudaHostRegister(base, length, 1))  # Portable
    if rc != 0:
        _log.warning("cudaHostRegister of a %d-byte ring failed (cudaError %d): its batches "
                     "are copied to the GPU synchronously", length, rc)
        return
    _pinned[base] = length


def _unregister_ring(base, length):
    if _pinned.pop(base, None) is not None:
        rc = int(torch.cuda.cudart().cudaHostUnregister(base))
        if rc != 0:
            _log.warning("cudaHostUnregister of a %d-byte ring failed (cudaError %d)",
                         length, rc)


_hooks_on = False


def _pin_rings():
    """Registers every shared-memory ring mapped from now on with CUDA (once
    per ring; unregistered before the library unmaps it)."""
    global _hooks_on
    if not _hooks_on:
        presto.set_ring_hooks(_register_ring, _unregister_ring)
        _hooks_on = True


class _GpuFence:
    """pin_memory without device: the trainer copies batches out of pinned
    rings with .to(device, non_blocking=True), which returns before the copy
    runs, so a batch's slot may go back to the daemon only once the GPU has
    passed what was queued before the batch was dropped. A dropped batch
    (its last view gone) waits here for an event recorded on the current
    stream at the next batch; its slot goes back once the event completed,
    checked at every batch and waited for when the iteration ends."""

    def __init__(self):
        self.lock = threading.RLock()  # a finalizer may run inside step()
        self.dropped = []              # releases waiting for the next event
        self.fenced = collections.deque()  # (event, releases), in order
        self.open = True

    def defer(self, release):
        """A batch's last view went (any thread)."""
        with self.lock:
            if self.open:
                self.dropped.append(release)
                return
        done = torch.cuda.Event()  # after the iteration: wait here
        done.record()
        done.synchronize()
        release()

    def _fence(self):
        with self.lock:
            dropped, self.dropped = self.dropped, []
        if dropped:
            done = torch.cuda.Event()
            done.record()
            self.fenced.append((done, dropped))

    def step(self):
        """At each batch, on the iterating thread."""
        self._fence()
        while self.fenced and self.fenced[0][0].query():
            for release in self.fenced.popleft()[1]:
                release()

    def close(self):
        with self.lock:
            self.open = False
        self._fence()
        while self.fenced:
            done, releases = self.fenced.popleft()
            done.synchronize()
            for release in releases:
                release()


class _DeviceCopy:
    """Copies batches to a CUDA device on a side stream, one batch ahead:
    batch i+1's copy runs while the training step uses batch i. A batch's host
    memory (a ring slot) is let go only once its copy is known to be done."""

    def __init__(self, device):
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def start(self, images, labels):
        """Enqueues the copy of one batch; returns what finish() needs."""
        with torch.cuda.stream(self.stream):
            if not labels.is_pinned():
                labels = labels.pin_memory()  # pageable memory would synchronize
            gi = images.to(self.device, non_blocking=True)
            gl = labels.to(self.device, non_blocking=True)
        done = torch.cuda.Event()
        done.record(self.stream)
        return gi, gl, done, (images, labels)

    def finish(self, pending):
        """The device tensors of a started copy, ordered after it on the
        current stream."""
        gi, gl, done, _ = pending
        current = torch.cuda.current_stream(self.device)
        current.wait_event(done)
        gi.record_stream(current)  # the allocator keeps them for the current stream's use
        gl.record_stream(current)
        return gi, gl

    def run(self, batches):
        """(images, labels) on the device, from host batches, one ahead."""
        pending = previous = None
        try:
            for images, labels in batches:
                started = self.start(images, labels)
                del images, labels
                if pending is not None:
                    out = self.finish(pending)
                    if previous is not None:
                        previous[2].synchronize()  # long done: its host memory may go
                    previous, pending = pending, started
                    yield out
                    del out
                else:
                    pending = started
            if pending is not None:
                yield self.finish(pending)
        finally:  # no slot goes back before its copy is done
            for p in (previous, pending):
                if p is not None:
                    p[2].synchronize()


class Dataset:
    """What loader.dataset is: the daemon's dataset, described (not indexable:
    presto serves batches). len() is its sample count; .classes its class
    names (sorted, as torchvision's ImageFolder has them), .class_to_idx the
    mapping, .fingerprint what a saved state must match, .name."""

    def __init__(self, name, info):
        self.name = name
        self.samples = info["samples"]
        self.classes = list(info.get("class_names", []))
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.fingerprint = info.get("fingerprint")
        self.shape = tuple(info.get("shape", ()))

    def __len__(self):
        return self.samples

    def __getitem__(self, index):
        raise TypeError("presto.torch.Dataset: prestod serves batches of '%s', not single "
                        "samples" % self.name)

    def __repr__(self):
        return "presto.torch.Dataset(%r, %d samples, %d classes)" % (
            self.name, self.samples, len(self.classes))


class Sampler:
    """What loader.sampler is: DistributedSampler's face of the loader.
    set_epoch(e) is loader.set_epoch(e); len() is the samples this rank gets
    per epoch; num_replicas, rank, shuffle, seed and drop_last as given."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)

    @property
    def epoch(self):
        return self._loader.epoch

    num_replicas = property(lambda self: self._loader.world_size)
    rank = property(lambda self: self._loader.rank)
    shuffle = property(lambda self: self._loader.shuffle)
    seed = property(lambda self: self._loader.seed)
    drop_last = property(lambda self: self._loader.drop_last)

    def __len__(self):
        return self._loader._per_rank()

    def __iter__(self):
        raise TypeError("presto.torch.Sampler: the order is the daemon's, delivered as "
                        "batches")


class Loader:
    """One rank's batches of a presto dataset, as (images, labels).

    rank/world_size: the arguments, else torch.distributed's when it is
    initialized, else 0/1. as_tensors=False yields numpy arrays instead of
    tensors. channels_last_to_chw=True yields images as an (N, C, H, W) view
    (permuted strides, no copy; call .contiguous() if a kernel needs it).
    copy=True yields batches that own plain copies. prefetch: batches the
    daemon prepares ahead (0: its default). transport: "auto" (shared memory
    where the daemon can, else the socket), "shm" or "socket".

    pin_memory (default: torch.cuda.is_available()): the shared-memory rings
    are registered with CUDA (cudaHostRegister, once per ring), so that
    .to("cuda", non_blocking=True) is truly asynchronous (socket batches are
    copied into pinned memory instead). device="cuda" (or "cuda:N"): yields
    tensors already on that GPU, copied on a side stream one batch ahead
    (pins as above). Without CUDA both do nothing (a warning for device), and
    nothing of CUDA is touched.

    A new iter() ends the previous iteration of this loader if it is still
    open (its stream and ring go; its batches stay valid); the old iterator
    then raises."""

    def __init__(self, dataset, batch_size=64, seed=0, shuffle=True, drop_last=False,
                 rank=None, world_size=None, socket=None, as_tensors=True,
                 channels_last_to_chw=False, copy=False, prefetch=0, transport="auto",
                 pin_memory=None, device=None):
        dist = _distributed()
        if rank is None:
            rank = dist[0] if dist else 0
        if world_size is None:
            world_size = dist[1] if dist else 1
        if not 0 <= rank < world_size:
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "rank %d is not in [0, world_size %d)" % (rank, world_size))
        if batch_size < 1:
            raise presto.InvalidArgumentError(presto.E_INVAL, "batch_size must be at least 1")
        self.name = dataset
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.socket = socket
        self.as_tensors = as_tensors
        self.channels_last_to_chw = channels_last_to_chw
        self.copy = copy
        self.prefetch = prefetch
        self.transport = transport
        self.pin_memory = pin_memory  # None: decided at the first iter()
        self.device = None if device is None else torch.device(device)
        self.sampler = Sampler(self)
        self.epoch = 0  # the epoch the next iter() streams
        self._epoch_set = False
        self._client = None
        self._dataset = None     # Dataset, fetched once, refreshed when it changes
        self._samples = None     # the dataset's sample count, from the daemon
        self._fingerprint = None  # ... and its fingerprint (hex), when known
        self._start = 0          # the batch the next iter() starts at (resuming)
        self._expect = None      # the fingerprint a loaded state wants
        self._position = None    # (epoch, next batch) where iteration stands or stopped
        self._stream = None      # the open iteration's
        self._device_warned = False

    # ---- what a DataLoader has ----

    @property
    def dataset(self):
        """The dataset (a Dataset: len() is its sample count, .classes)."""
        if self._dataset is None or self._dataset.fingerprint != self._fingerprint:
            self._learn(self._connection().dataset(self.name))
        return self._dataset

    def _learn(self, info):
        self._dataset = Dataset(self.name, info)
        self._samples = self._dataset.samples
        self._fingerprint = self._dataset.fingerprint

    def _connection(self):
        if self._client is None:
            self._client = presto.Client(self.socket)
        return self._client

    def _per_rank(self):
        if self._samples is None:
            self._learn(self._connection().dataset(self.name))
        return -(-self._samples // self.world_size)

    def set_epoch(self, epoch):
        """Streams epoch `epoch` from now on, until the next set_epoch. A
        loaded state's position stays only for the epoch it is in."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self._start = 0
            self._expect = None
        self.epoch = epoch
        self._epoch_set = True
        self._position = None

    def __len__(self):
        """Batches per iteration for this rank, DistributedSampler-style: the
        dataset is padded to a multiple of world_size, each rank gets
        ceil(n / world_size) samples, batched with or without the short tail.
        The dataset's size is asked once (and learnt again from every stream)."""
        per_rank = self._per_rank()
        if self.drop_last:
            return per_rank // self.batch_size
        return -(-per_rank // self.batch_size)

    # ---- resuming ----

    def state_dict(self):
        """Where this loader stands, to resume from with load_state_dict():
        the epoch and the batches of it consumed (those yielded so far while
        iterating, all of them once it ended), with what they depend on
        (dataset, fingerprint, sample count, seed, batch_size, shuffle,
        drop_last, rank, world_size)."""
        epoch, batches = self._position or (self.epoch, self._start)
        if self._fingerprint is None:
            try:
                self._learn(self._connection().dataset(self.name))
            except presto.PrestoError as e:
                _log.warning("state_dict: the daemon cannot say the dataset's fingerprint "
                             "(%s): this state cannot be checked when loaded", e)
        return {"version": STATE_VERSION, "dataset": self.name,
                "fingerprint": self._fingerprint, "samples": self._samples,
                "epoch": epoch, "batches": batches, "seed": self.seed,
                "batch_size": self.batch_size, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "rank": self.rank,
                "world_size": self.world_size}

    def load_state_dict(self, state):
        """The next iter() resumes state's epoch after its consumed batches:
        the daemon computes nothing before them, and the batches are the
        uninterrupted epoch's from there, byte for byte. The seed is taken from
        the state. A state of another dataset, another version of it (files or
        steps: the fingerprint), another batch_size, world_size, shuffle or
        drop_last is refused (InvalidArgumentError); one of another rank of
        the same world is taken as this rank's position (DDP ranks move in
        step)."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "not a presto Loader state (version %r, want %d)"
                % (state.get("version") if isinstance(state, dict) else None, STATE_VERSION))

        def refuse(what, saved, mine):
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "state refused: it was saved with %s %r, this loader has "
                "%r (the resumed epoch would not be the saved one's)" % (what, saved, mine))

        if state["dataset"] != self.name:
            refuse("dataset", state["dataset"], self.name)
        for key, mine in (("batch_size", self.batch_size), ("world_size", self.world_size)):
            if state[key] != mine:
                refuse(key, state[key], mine)
        for key, mine in (("shuffle", self.shuffle), ("drop_last", self.drop_last)):
            if bool(state[key]) != bool(mine):
                refuse(key, bool(state[key]), bool(mine))
        saved = state.get("fingerprint")
        try:
            self._learn(self._connection().dataset(self.name))
        except presto.NoDatasetError:
            raise
        except presto.PrestoError:  # the daemon is away: checked when a stream opens
            pass
        if saved and self._fingerprint and saved != self._fingerprint:
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "state refused: dataset '%s' changed since it was saved "
                "(fingerprint %s, now %s: other files or steps)"
                % (self.name, saved, self._fingerprint))
        if not saved:
            _log.warning("load_state_dict: the state has no fingerprint: the dataset cannot "
                         "be checked to be the same")
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self._start = int(state["batches"])
        self._expect = saved
        self._position = None

    # ---- iterating ----

    def _wants_cuda(self):
        if self.device is not None and self.device.type == "cuda":
            if _cuda_available():
                return True
            if not self._device_warned:
                self._device_warned = True
                _log.warning("Loader(device=%r): CUDA is not available; batches stay on the "
                             "CPU", str(self.device))
            return False
        if self.pin_memory is None:
            return _cuda_available()
        return bool(self.pin_memory) and _cuda_available()

    def __iter__(self):
        """Opens the stream for the current epoch (errors raise here)."""
        if self._stream is not None:  # an iteration left open: it ends now
            self._stream.close("this iteration of Loader('%s') was ended by a newer "
                               "iter(loader)" % self.name)
            self._stream = None
        cuda = self._wants_cuda()
        fence = None
        if cuda:
            _pin_rings()
            if self.device is None:
                fence = _GpuFence()
        epoch, start = self.epoch, self._start
        if not self._epoch_set:
            self.epoch += 1
        stream = self._connection().stream(
            self.name, batch_size=self.batch_size, seed=self.seed, epoch=epoch,
            rank=self.rank, world=self.world_size, shuffle=self.shuffle,
            drop_last=self.drop_last, prefetch=self.prefetch, copy=self.copy,
            transport=self.transport, start_batch=start,
            defer_release=fence.defer if fence else None)
        info = stream.info
        if self._expect and info.fingerprint and info.fingerprint != self._expect:
            stream.close()
            raise presto.InvalidArgumentError(
                presto.E_INVAL, "state refused: dataset '%s' changed since it was saved "
                "(fingerprint %s, now %s: other files or steps)"
                % (self.name, self._expect, info.fingerprint))
        self._start, self._expect = 0, None
        if info.dataset_samples:
            if info.fingerprint != self._fingerprint:
                self._dataset = None  # learnt again when asked
            self._samples, self._fingerprint = info.dataset_samples, info.fingerprint
        self._stream = stream
        self._position = (epoch, min(start, info.batches))
        batches = self._batches(stream, epoch, cuda and info.transport == "socket", fence)
        if cuda and self.device is not None and self.as_tensors:
            return _DeviceCopy(self.device).run(batches)
        return batches

    def _batches(self, stream, epoch, pin_copies, fence):
        try:
            with stream:
                while True:
                    if fence is not None:
                        fence.step()
                    batch = next(stream, None)
                    if batch is None:
                        break
                    if self.as_tensors:
                        images, labels, *lengths = batch.tensors()
                        if pin_copies:  # socket batches: into pinned memory
                            images, labels = images.pin_memory(), labels.pin_memory()
                            lengths = [t.pin_memory() for t in lengths]
                        if self.channels_last_to_chw:
                            images = images.permute(0, 3, 1, 2)
                    else:
                        images, labels = batch.images, batch.labels
                        lengths = [] if batch.lengths is None else [batch.lengths]
                        if self.channels_last_to_chw:
                            images = images.transpose(0, 3, 1, 2)
                    self._position = (epoch, batch.index + 1)
                    del batch
                    # (images, labels), and lengths third for padded samples
                    yield (images, labels, *lengths)
                    del images, labels, lengths
            self._position = (epoch, stream.info.batches)  # the whole epoch is consumed
        finally:
            if self._stream is stream:
                self._stream = None
            if fence is not None:
                fence.close()

    def close(self):
        """Ends an open iteration and closes the control connection."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
