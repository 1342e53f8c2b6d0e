"""presto: Python binding of libprestoclient (ctypes, no compiled extension).

    import presto

    with presto.Client() as client:                 # default socket
        print(client.datasets())
        with client.stream("imagenet", batch_size=64, epoch=3) as stream:
            for batch in stream:                     # len(stream) batches
                images, labels = batch.images, batch.labels   # numpy, no copy
                ...

For torch, presto.torch.Loader drops in where a DataLoader is used.

Transport: by default a stream gets its batches through shared memory (the
daemon's workers write them into a ring of slots this process maps; only slot
numbers and labels cross the socket), falling back to copies through the
socket where the daemon cannot share memory. transport="shm" insists on
shared memory, transport="socket" asks for copies ($PRESTO_TRANSPORT sets the
default). Images are (n, h, w, c), or (n, c, h, w) when the pipeline ends in
a float step with layout: nchw (Batch.layout, StreamInfo.layout).

Lifetime: Batch.images, Batch.labels and Batch.tensors() are views of the
batch's own memory (its shared-memory slot, or its receive buffer), not
copies, and that memory stays the batch's for as long as any of them (or
anything made from them without a copy) is alive: the slot goes back to the
daemon when the last one is garbage-collected. So batches may be kept
(list(stream), a prefetch queue, the last batch for logging) and they keep
their bytes. A training loop that drops each batch before taking the next
stays zero-copy; when the caller holds every other slot of the ring, a batch
arriving in the last one is copied out of it instead (Stream.copies counts
them, and the daemon's stats shm.copies), so keeping batches never stalls the
stream. batch.release() hands the memory back at once, after which its views
must not be used; copy=True gives batches that own plain numpy copies.

Errors raise PrestoError with .code (one of the E_* constants) and the
library's message, which carries the daemon's own text when the daemon refused
a request, e.g. "prestod: no dataset named 'x'". While next() waits for the
daemon, Ctrl-C raises KeyboardInterrupt at once (the stream stays usable).

`python3 -m presto stats` (or datasets, version) asks the daemon from the
command line.
"""

import collections
import ctypes
import functools
import json
import logging
import os
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import (DTYPE_F32, DTYPE_I16, DTYPE_I64, DTYPE_U8, E_DENIED, E_INTERNAL, E_INTR, E_INVAL, E_IO,
                   E_LIMIT, E_NODATASET, E_NOMEM, E_PROTO, E_SAMPLE, E_SHUTDOWN,
                   E_TOOBIG, E_VERSION, LAYOUT_NCHW, LAYOUT_NHWC, TRANSPORT_AUTO,
                   TRANSPORT_SHM, TRANSPORT_SOCKET)

__all__ = [
    "Client", "Stream", "Batch", "StreamInfo", "PrestoError", "NoDatasetError",
    "InvalidArgumentError", "default_socket", "version", "strerror", "set_ring_hooks",
    "E_PROTO", "E_VERSION", "E_TOOBIG", "E_NODATASET", "E_INVAL", "E_LIMIT",
    "E_SAMPLE", "E_SHUTDOWN", "E_IO", "E_NOMEM", "E_INTERNAL", "E_DENIED", "E_INTR",
    "DTYPE_U8", "DTYPE_F32", "DTYPE_I16", "DTYPE_I64", "LAYOUT_NHWC", "LAYOUT_NCHW",
]

_c = _lib.lib  # the loaded libprestoclient
_NP_DTYPES = {DTYPE_U8: np.dtype(np.uint8), DTYPE_F32: np.dtype(np.float32),
              DTYPE_I16: np.dtype(np.int16), DTYPE_I64: np.dtype(np.int64)}
_TRANSPORTS = {"auto": TRANSPORT_AUTO, "shm": TRANSPORT_SHM, "socket": TRANSPORT_SOCKET}
_TRANSPORT_NAMES = {TRANSPORT_SHM: "shm", TRANSPORT_SOCKET: "socket"}
_LAYOUT_NAMES = {LAYOUT_NHWC: "nhwc", LAYOUT_NCHW: "nchw"}


def _sample_shape(layout, h, w, c):
    return (c, h, w) if layout == LAYOUT_NCHW else (h, w, c)


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def version():
    """The library's version string (PRESTO_VERSION_STRING)."""
    return _text(_c.presto_version())


def default_socket():
    """The socket used when none is given: $PRESTO_SOCKET, else
    $XDG_RUNTIME_DIR/presto/prestod.sock, else /tmp/presto-$UID/prestod.sock."""
    return _text(_c.presto_default_socket())


def strerror(code):
    """The short name of an error code (code or -code)."""
    return _text(_c.presto_strerror(int(code)))


class PrestoError(Exception):
    """A libprestoclient failure: .code is a positive E_* constant, .message
    the full explanation (presto_errmsg / presto_stream_errmsg)."""

    def __init__(self, code, message=""):
        self.code = abs(int(code))
        self.message = message or strerror(self.code)
        super().__init__(self.code, self.message)

    @property
    def name(self):
        """The code's short description (presto_strerror)."""
        return strerror(self.code)

    def __str__(self):
        return self.message


class NoDatasetError(PrestoError, LookupError):
    """The daemon serves no dataset by that name (E_NODATASET)."""


class InvalidArgumentError(PrestoError, ValueError):
    """A bad argument (E_INVAL), found by the binding, the library or the daemon."""


_ERROR_CLASSES = {E_NODATASET: NoDatasetError, E_INVAL: InvalidArgumentError}


def _error(code, message):
    return _ERROR_CLASSES.get(abs(code), PrestoError)(code, message)


def _uint(name, value, bits):
    """Checks that value fits the C field (ctypes would silently truncate it)."""
    v = int(value)
    if not 0 <= v < 1 << bits:
        raise InvalidArgumentError(E_INVAL, "%s must be in [0, 2**%d), not %r"
                                   % (name, bits, value))
    return v


# The hooks in force (presto_set_ring_hooks keeps only C pointers: the ctypes
# callbacks must stay alive as long as the library may call them).
_ring_hooks = None


def set_ring_hooks(mapped, unmapping):
    """Process-wide: mapped(base, length) is called right after the library
    maps a shared-memory ring, unmapping(base, length) right before it unmaps
    one (base an int address), from the thread that does it; None, None
    removes them. presto.torch uses them to register rings with CUDA. An
    exception in a hook is logged (logger "presto") and otherwise ignored."""
    global _ring_hooks

    def wrap(fn):
        if fn is None:
            return _lib.RING_FN()

        def call(base, length, arg):
            try:
                fn(base, length)
            except Exception:  # never into C
                logging.getLogger("presto").exception("ring hook %r failed", fn)
        return _lib.RING_FN(call)

    hooks = (wrap(mapped), wrap(unmapping))
    _c.presto_set_ring_hooks(hooks[0], hooks[1], None)
    _ring_hooks = hooks if mapped is not None or unmapping is not None else None


class Client:
    """A connection to prestod (presto_t). socket None means default_socket().

    Use as a context manager, or call close(). Threads may share a Client
    (its calls take turns); a Stream has its own connection and belongs to
    one thread at a time. Blocking calls release the GIL. A call on a
    connection the daemon closed since (it restarted) reconnects."""

    def __init__(self, socket=None):
        h = ctypes.c_void_p()
        path = None if socket is None else os.fsencode(socket)
        rc = _c.presto_connect(path, ctypes.byref(h))
        if rc < 0:
            msg = _text(_c.presto_errmsg(h))
            _c.presto_close(h)
            raise _error(rc, msg)
        self._h = h
        self._lock = threading.Lock()  # presto_t is not thread-safe
        self.socket = default_socket() if socket is None else os.fsdecode(socket)
        self._finalizer = weakref.finalize(self, _c.presto_close, h)

    def _handle(self):
        if self._h is None:
            raise InvalidArgumentError(E_INVAL, "presto client is closed")
        return self._h

    def _json(self, fn):
        out = ctypes.c_void_p()
        with self._lock:
            h = self._handle()
            rc = fn(h, ctypes.byref(out))
            if rc < 0:
                raise _error(rc, _text(_c.presto_errmsg(h)))
        try:
            return json.loads(ctypes.string_at(out.value).decode("utf-8"))
        finally:
            _lib.free(out)

    def stats(self):
        """The daemon's stats document, parsed (dict)."""
        return self._json(_c.presto_stats)

    def datasets(self):
        """The datasets the daemon serves: {"datasets": [{...}, ...]}."""
        return self._json(_c.presto_datasets)

    def dataset(self, name):
        """One entry of datasets() (samples, classes, class_names, fingerprint,
        shape, ...); NoDatasetError when the daemon serves none by that name."""
        for d in self.datasets()["datasets"]:
            if d["name"] == name:
                return d
        raise NoDatasetError(E_NODATASET, "prestod: no dataset named '%s'" % name)

    def stream(self, dataset, batch_size=64, seed=0, epoch=0, rank=0, world=1,
               shuffle=True, drop_last=False, prefetch=0, copy=False, transport="auto",
               start_batch=0, defer_release=None):
        """Opens one epoch stream (its own connection; it does not depend on
        this Client staying open). rank/world follow DistributedSampler:
        each sample once across the ranks of an epoch when the dataset size
        divides by world. copy=True makes every batch own a plain copy of its
        arrays (see the module's lifetime rule). transport: "auto" (shared
        memory where possible), "shm" or "socket". start_batch: resume the
        epoch there (the daemon computes nothing before it; the batches are
        the uninterrupted epoch's, with their indices). defer_release: when
        the last view of a zero-copy batch goes, defer_release(release) is
        called instead of giving the memory back at once, and release() gives
        it back (presto.torch waits for the GPU's copies so)."""
        if transport not in _TRANSPORTS:
            raise InvalidArgumentError(E_INVAL, "transport must be one of %s, not %r"
                                       % (sorted(_TRANSPORTS), transport))
        o = _lib.StreamOpts()
        _c.presto_stream_opts_init(ctypes.byref(o))
        o.dataset = os.fsencode(dataset)
        o.batch_size = _uint("batch_size", batch_size, 32)
        o.seed = _uint("seed", seed, 64)
        o.epoch = _uint("epoch", epoch, 64)
        o.rank = _uint("rank", rank, 32)
        o.world = _uint("world", world, 32)
        o.shuffle = 1 if shuffle else 0
        o.drop_last = 1 if drop_last else 0
        o.prefetch = _uint("prefetch", prefetch, 32)
        o.transport = _TRANSPORTS[transport]
        o.start_batch = _uint("start_batch", start_batch, 64)
        o.manual_release = 1  # a batch's memory is its own until its views go
        o.copy_when_full = 1  # ... and holding every slot copies, never stalls
        o.interruptible = 1   # Ctrl-C while next() waits
        s = ctypes.c_void_p()
        with self._lock:
            h = self._handle()
            rc = _c.presto_stream_open(h, ctypes.byref(o), ctypes.byref(s))
            if rc < 0:
                raise _error(rc, _text(_c.presto_errmsg(h)))
        return Stream(_StreamHandle(s.value), copy, defer_release)

    def close(self):
        """Closes the control connection (open streams keep running)."""
        with self._lock:
            self._h = None
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _StreamHandle:
    """Owns a presto_stream_t *: close() (or garbage collection) closes it
    once. Batches still held keep the C stream (and its ring) alive by
    themselves: the library frees it with the last of their releases."""

    def __init__(self, ptr):
        self.ptr = ptr
        self._finalizer = weakref.finalize(self, _c.presto_stream_close, ptr)

    def close(self):
        self._finalizer()


def _release(ptr, b):
    _c.presto_release(ptr, ctypes.byref(b))


class _Slot:
    """The memory of one zero-copy batch (a presto_batch_t), released when
    the last view of it goes (the views' buffers hold this object), or
    handed to defer(release) then."""

    __slots__ = ("ptr", "b", "defer", "__weakref__")

    def __init__(self, ptr, b, defer=None):
        self.ptr, self.b, self.defer = ptr, b, defer

    def release(self):
        b, self.b = self.b, None
        if b is not None:
            _release(self.ptr, b)

    def __del__(self):
        if self.b is None or _c is None:  # released, or the interpreter is going
            return
        if self.defer is None:
            self.release()
        else:
            b, self.b = self.b, None
            self.defer(functools.partial(_release, self.ptr, b))


StreamInfo = collections.namedtuple(
    "StreamInfo", "samples batches shape dtype layout transport slots dataset_samples "
    "fingerprint prefetch label_dtype label_shape lengths")
StreamInfo.__doc__ = """What a stream delivers to this rank: samples, batches
(the whole epoch's, also when the stream resumes it), shape of one sample
((h, w, c), or (c, h, w) for layout "nchw"), the numpy dtype of the images,
layout ("nhwc" or "nchw"), transport ("shm" or "socket"), the shared-memory
ring's slots (0 on the socket), the whole dataset's samples and its
fingerprint (16 hex digits; None when the daemon did not say), and the
prefetch the daemon granted on either transport: the one asked for, or lower
where its client memory budget could not hold it (0: the daemon did not
say); then every batch's label tensor: label_dtype (numpy int64, or float32
for soft targets) and label_shape (a sample's: () for a class index, (K,)
for soft targets of K classes), and lengths (True: batches carry the
samples' lengths before padding)."""


def _view(addr, nbytes, dtype, shape, owner):
    """A numpy array over nbytes at addr (no copy) that keeps owner alive."""
    if nbytes == 0:
        return np.empty(shape, dtype)
    buf = (ctypes.c_ubyte * nbytes).from_address(addr)
    buf._presto_owner = owner  # the array's base is buf: buf keeps the memory
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _label_view(b, owner):
    """The batch's label tensor: (n,) int64, or (n, K) float32 soft targets."""
    if b.label_dtype == DTYPE_F32:
        k = b.label_classes
        return _view(b.label_data or 0, 4 * b.n * k, np.dtype(np.float32), (b.n, k), owner)
    return _view(b.label_data or b.labels or 0, 8 * b.n, np.dtype(np.int64), (b.n,), owner)


class Batch:
    """One batch: .images (n, h, w, c) uint8 or float32 ((n, c, h, w) when
    .layout is LAYOUT_NCHW), .labels (n,) int64 class indices, or (n, K)
    float32 soft targets for a dataset whose steps end with mixup/cutmix,
    .lengths (n,) int64 (each sample's length before padding to the batch's
    longest) or None for a dataset without, .index (the batch number within
    this rank's epoch).

    The arrays are views of the batch's own memory, which stays valid for as
    long as any of them lives (see the module docstring), unless the stream
    was opened with copy=True: then they are plain copies."""

    def __init__(self, handle, b, copy, defer=None):
        dtype = _NP_DTYPES.get(b.dtype)
        shape = (b.n,) + _sample_shape(b.layout, b.h, b.w, b.c)
        if dtype is None or b.size != b.n * b.h * b.w * b.c * dtype.itemsize:
            _c.presto_release(handle.ptr, ctypes.byref(b))
            raise PrestoError(E_PROTO, "batch of %r dtype %d in %d bytes"
                              % (shape, b.dtype, b.size))
        self.index = b.index
        self.layout = b.layout
        self.data_ptr = b.data or 0        # the C pointers, for interop and checks
        self.labels_ptr = b.label_data or b.labels or 0
        self.owned = bool(copy)
        slot = _Slot(handle.ptr, b, None if copy else defer)
        self._images = _view(self.data_ptr, b.size, dtype, shape, slot)
        self._labels = _label_view(b, slot)
        self._lengths = (_view(b.lengths, 8 * b.n, np.dtype(np.int64), (b.n,), slot)
                         if b.lengths else None)
        if copy:
            self._images = self._images.copy()
            self._labels = self._labels.copy()
            if self._lengths is not None:
                self._lengths = self._lengths.copy()
            slot.release()
            self._slot = None
        else:
            self._slot = weakref.ref(slot)  # the views hold it, not the Batch

    def __len__(self):
        return len(self._labels)

    @property
    def released(self):
        """True once release() gave the memory back (never for an owned copy)."""
        return self._images is None

    def _check(self):
        if self.released:
            raise InvalidArgumentError(E_INVAL, "batch %d was released; its memory now "
                                       "holds another batch" % self.index)

    @property
    def images(self):
        """(n, h, w, c) or (n, c, h, w) numpy array; a view unless the stream copies."""
        self._check()
        return self._images

    @property
    def labels(self):
        """(n,) int64 or (n, K) float32 (soft targets) numpy array; a view
        unless the stream copies."""
        self._check()
        return self._labels

    @property
    def lengths(self):
        """(n,) int64 numpy array of the samples' lengths before padding, or
        None when the dataset pads nothing; a view unless the stream copies."""
        self._check()
        return self._lengths

    def tensors(self):
        """(images, labels) as torch tensors sharing the arrays' memory, and
        lengths as a third when the dataset has them."""
        import torch as _torch  # the real torch, not presto.torch
        t = (_torch.from_numpy(self.images), _torch.from_numpy(self.labels))
        if self._lengths is not None:
            t += (_torch.from_numpy(self._lengths),)
        return t

    def release(self):
        """Hands the batch's memory back now (idempotent; nothing for an owned
        copy). Views taken from it must not be used afterwards: the daemon
        writes other batches there."""
        if self.owned or self._images is None:
            return
        slot = self._slot()
        self._images = self._labels = self._lengths = None
        if slot is not None:
            slot.release()


class Stream:
    """An epoch stream: iterate for Batch objects; len() is the number of
    batches this rank receives. Use as a context manager, or call close() to
    stop early (batches still alive keep their memory)."""

    def __init__(self, handle, copy=False, defer_release=None):
        self._handle = handle
        self._copy = copy
        self._defer = defer_release
        self._ended = None  # why close() ended it early, for a later next()
        i = _lib.StreamInfo()
        _c.presto_stream_info(handle.ptr, ctypes.byref(i))
        dtype = _NP_DTYPES.get(i.dtype)
        self.info = StreamInfo(i.samples, i.batches, _sample_shape(i.layout, i.h, i.w, i.c),
                               dtype, _LAYOUT_NAMES.get(i.layout, "nhwc"),
                               _TRANSPORT_NAMES.get(i.transport, "socket"), i.slots,
                               i.dataset_samples,
                               "%016x" % i.fingerprint if i.fingerprint else None,
                               _c.presto_stream_prefetch(handle.ptr),
                               _NP_DTYPES.get(i.label_dtype, np.dtype(np.int64)),
                               (i.label_classes,) if i.label_classes else (),
                               bool(i.has_lengths))

    def __len__(self):
        """Batches this epoch's plan holds: an upper bound, since bad samples
        the daemon skips (on_error: skip) close up the batches behind them."""
        return self.info.batches

    def __iter__(self):
        return self

    def __next__(self):
        h = self._handle
        if h is None:
            if self._ended:
                raise InvalidArgumentError(E_INVAL, self._ended)
            raise StopIteration
        b = _lib.BatchStruct()
        while True:
            rc = _c.presto_next(h.ptr, ctypes.byref(b))
            if rc != -E_INTR:
                break
            # A signal arrived while waiting: its Python handler has run by
            # now (KeyboardInterrupt propagates from here); nothing was lost.
        if rc < 0:
            raise _error(rc, _text(_c.presto_stream_errmsg(h.ptr)))
        if rc == 0:
            raise StopIteration
        return Batch(h, b, self._copy, self._defer)

    def next_batch(self):
        """The next Batch, or None at the end of the epoch."""
        return next(self, None)

    def _info(self):
        i = _lib.StreamInfo()
        _c.presto_stream_info(self._handle.ptr, ctypes.byref(i))
        return i

    @property
    def copies(self):
        """Batches copied out of the ring so far because the caller held every
        other slot (batches kept alive), instead of stalling."""
        return self._copies if self._handle is None else self._info().copies

    @property
    def skipped(self):
        """Samples the daemon skipped as bad (known once the epoch ended)."""
        if self._handle is None:
            return self._skipped
        return _c.presto_stream_skipped(self._handle.ptr)

    def close(self, reason=None):
        """Stops the stream (if it still runs, the daemon stops it and frees
        its ring). Batches still alive keep their memory until they go.
        reason: what a later next() raises (else it ends the iteration)."""
        if self._handle is None:
            return
        self._skipped = _c.presto_stream_skipped(self._handle.ptr)
        self._copies = self._info().copies
        self._ended = reason
        h, self._handle = self._handle, None
        h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
