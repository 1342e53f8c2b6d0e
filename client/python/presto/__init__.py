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

!!! ZERO-COPY LIFETIME RULE !!!
Batch.images, Batch.labels and Batch.tensors() are views of the stream's
memory (a shared-memory slot, or the socket's receive buffer), not copies.
That memory is REUSED: once the batch is released
-- by batch.release(), or implicitly when the next batch is requested from the
stream -- every array or tensor taken from it shows the NEXT batch's bytes.
Use (or copy) a batch's arrays before asking for the next one. If you keep
batches around (lists of tensors, prefetch queues, ...), open the stream with
copy=True: each batch then owns a copy that stays valid.
(Closing the stream while views are still alive is safe: the buffer is freed
only when the last view is gone.)

Errors raise PrestoError with .code (one of the E_* constants) and the
library's message, which carries the daemon's own text when the daemon refused
a request, e.g. "prestod: no dataset named 'x'".
"""

import collections
import ctypes
import json
import os
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import (DTYPE_F32, DTYPE_U8, E_DENIED, E_INTERNAL, E_INVAL, E_IO,
                   E_LIMIT, E_NODATASET, E_NOMEM, E_PROTO, E_SAMPLE, E_SHUTDOWN,
                   E_TOOBIG, E_VERSION, LAYOUT_NCHW, LAYOUT_NHWC, TRANSPORT_AUTO,
                   TRANSPORT_SHM, TRANSPORT_SOCKET)

__all__ = [
    "Client", "Stream", "Batch", "StreamInfo", "PrestoError", "NoDatasetError",
    "InvalidArgumentError", "default_socket", "version", "strerror",
    "E_PROTO", "E_VERSION", "E_TOOBIG", "E_NODATASET", "E_INVAL", "E_LIMIT",
    "E_SAMPLE", "E_SHUTDOWN", "E_IO", "E_NOMEM", "E_INTERNAL", "E_DENIED",
    "DTYPE_U8", "DTYPE_F32", "LAYOUT_NHWC", "LAYOUT_NCHW",
]

_c = _lib.lib  # the loaded libprestoclient
_NP_DTYPES = {DTYPE_U8: np.dtype(np.uint8), DTYPE_F32: np.dtype(np.float32)}
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


class Client:
    """A connection to prestod (presto_t). socket None means default_socket().

    Use as a context manager, or call close(). Threads may share a Client
    (its calls take turns); a Stream has its own connection and belongs to
    one thread at a time. Blocking calls release the GIL."""

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

    def stream(self, dataset, batch_size=64, seed=0, epoch=0, rank=0, world=1,
               shuffle=True, drop_last=False, prefetch=0, copy=False, transport="auto"):
        """Opens one epoch stream (its own connection; it does not depend on
        this Client staying open). rank/world follow DistributedSampler:
        each sample once across the ranks of an epoch when the dataset size
        divides by world. copy=True makes every batch own a copy of its
        arrays (see the module's lifetime rule). transport: "auto" (shared
        memory where possible), "shm" or "socket"."""
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
        s = ctypes.c_void_p()
        with self._lock:
            h = self._handle()
            rc = _c.presto_stream_open(h, ctypes.byref(o), ctypes.byref(s))
            if rc < 0:
                raise _error(rc, _text(_c.presto_errmsg(h)))
        return Stream(_StreamHandle(s.value), copy)

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
    """Owns a presto_stream_t *. presto_stream_close runs when the last
    reference goes: the Stream's, or one held by a batch view's buffer, so
    that a view never points at freed memory."""

    def __init__(self, ptr):
        self.ptr = ptr
        weakref.finalize(self, _c.presto_stream_close, ptr)


StreamInfo = collections.namedtuple("StreamInfo",
                                    "samples batches shape dtype layout transport slots")
StreamInfo.__doc__ = """What a stream delivers to this rank: samples, batches,
shape of one sample ((h, w, c), or (c, h, w) for layout "nchw"), the numpy
dtype of the images, layout ("nhwc" or "nchw"), transport ("shm" or
"socket") and the shared-memory ring's slots (0 on the socket)."""


def _view(addr, nbytes, dtype, shape, owner):
    """A numpy array over nbytes at addr (no copy) that keeps owner alive."""
    if nbytes == 0:
        return np.empty(shape, dtype)
    buf = (ctypes.c_ubyte * nbytes).from_address(addr)
    buf._presto_owner = owner  # the array's base is buf: buf keeps the memory
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


class Batch:
    """One batch: .images (n, h, w, c) uint8 or float32 ((n, c, h, w) when
    .layout is LAYOUT_NCHW), .labels (n,) int64, .index (the batch number
    within this rank's epoch).

    Unless the stream was opened with copy=True, the arrays are views of the
    stream's buffer, valid only until this batch is released (release(), or
    the stream's next batch); see the module docstring."""

    def __init__(self, handle, b, copy):
        dtype = _NP_DTYPES.get(b.dtype)
        shape = (b.n,) + _sample_shape(b.layout, b.h, b.w, b.c)
        if dtype is None or b.size != b.n * b.h * b.w * b.c * dtype.itemsize:
            raise PrestoError(E_PROTO, "batch of %r dtype %d in %d bytes"
                              % (shape, b.dtype, b.size))
        self.index = b.index
        self.layout = b.layout
        self.data_ptr = b.data or 0        # the C pointers, for interop and checks
        self.labels_ptr = b.labels or 0
        self.owned = bool(copy)
        self._images = _view(self.data_ptr, b.size, dtype, shape, handle)
        self._labels = _view(self.labels_ptr, 8 * b.n, np.dtype(np.int64), (b.n,), handle)
        if copy:
            self._images = self._images.copy()
            self._labels = self._labels.copy()
            _c.presto_release(handle.ptr, ctypes.byref(b))
            self._handle, self._b = None, None
        else:
            self._handle, self._b = handle, b

    def __len__(self):
        return len(self._labels)

    @property
    def released(self):
        """True once the views are invalid (never for an owned copy)."""
        return not self.owned and self._handle is None

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
        """(n,) int64 numpy array; a view unless the stream copies."""
        self._check()
        return self._labels

    def tensors(self):
        """(images, labels) as torch tensors sharing the arrays' memory."""
        import torch as _torch  # the real torch, not presto.torch
        return _torch.from_numpy(self.images), _torch.from_numpy(self.labels)

    def release(self):
        """Hands the batch's memory back to the stream (idempotent). Views taken
        from it must not be used afterwards."""
        if self._handle is not None:
            _c.presto_release(self._handle.ptr, ctypes.byref(self._b))
            self._handle, self._b = None, None


class Stream:
    """An epoch stream: iterate for Batch objects; len() is the number of
    batches this rank receives. Requesting a batch releases the previous
    one. Use as a context manager, or call close() to stop early."""

    def __init__(self, handle, copy=False):
        self._handle = handle
        self._copy = copy
        self._batch = None
        i = _lib.StreamInfo()
        _c.presto_stream_info(handle.ptr, ctypes.byref(i))
        dtype = _NP_DTYPES.get(i.dtype)
        self.info = StreamInfo(i.samples, i.batches, _sample_shape(i.layout, i.h, i.w, i.c),
                               dtype, _LAYOUT_NAMES.get(i.layout, "nhwc"),
                               _TRANSPORT_NAMES.get(i.transport, "socket"), i.slots)

    def __len__(self):
        """Batches this epoch's plan holds: an upper bound, since bad samples
        the daemon skips (on_error: skip) close up the batches behind them."""
        return self.info.batches

    def __iter__(self):
        return self

    def __next__(self):
        if self._handle is None:
            raise StopIteration
        if self._batch is not None:
            self._batch.release()
            self._batch = None
        h = self._handle
        b = _lib.BatchStruct()
        rc = _c.presto_next(h.ptr, ctypes.byref(b))
        if rc < 0:
            raise _error(rc, _text(_c.presto_stream_errmsg(h.ptr)))
        if rc == 0:
            raise StopIteration
        self._batch = Batch(h, b, self._copy)
        return self._batch

    def next_batch(self):
        """The next Batch, or None at the end of the epoch."""
        return next(self, None)

    @property
    def skipped(self):
        """Samples the daemon skipped as bad (known once the epoch ended)."""
        if self._handle is None:
            return self._skipped
        return _c.presto_stream_skipped(self._handle.ptr)

    def close(self):
        """Releases the current batch and stops the stream (if batch views are
        still alive, the connection and buffer go when the last one does)."""
        if self._handle is None:
            return
        self._skipped = _c.presto_stream_skipped(self._handle.ptr)
        if self._batch is not None:
            self._batch.release()
            self._batch = None
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
