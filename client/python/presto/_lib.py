"""ctypes declarations of libprestoclient (client/presto.h), loaded once.

The library is looked up in this order:
  1. $PRESTO_LIB, a path to the shared object;
  2. build/libprestoclient.so.0 of the source tree this package lives in
     (client/python/presto -> ../../../build);
  3. LIBDIR/libprestoclient.so.0 where `make install` put it (it writes
     presto/_install.py with LIBDIR);
  4. the system's libprestoclient (ctypes.util.find_library, then the soname).
"""

import ctypes
import ctypes.util
import os

SONAME = "libprestoclient.so.0"

# Error codes (presto.h PRESTO_E_*), positive; the C functions return them negated.
E_PROTO = 1
E_VERSION = 2
E_TOOBIG = 3
E_NODATASET = 4
E_INVAL = 5
E_LIMIT = 6
E_SAMPLE = 7
E_SHUTDOWN = 8
E_IO = 9
E_NOMEM = 10
E_INTERNAL = 11
E_DENIED = 12
E_INTR = 13  # the client's own: a signal arrived while presto_next waited

DTYPE_U8 = 1
DTYPE_F32 = 2
DTYPE_I16 = 3
DTYPE_I64 = 4  # labels and lengths

LAYOUT_NHWC = 0
LAYOUT_NCHW = 1

TRANSPORT_AUTO = 0
TRANSPORT_SHM = 1
TRANSPORT_SOCKET = 2


class StreamOpts(ctypes.Structure):
    """presto_stream_opts_t"""
    _fields_ = [
        ("dataset", ctypes.c_char_p),
        ("batch_size", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("shuffle", ctypes.c_int),
        ("drop_last", ctypes.c_int),
        ("prefetch", ctypes.c_uint32),
        ("transport", ctypes.c_uint32),
        ("manual_release", ctypes.c_int),
        ("start_batch", ctypes.c_uint64),
        ("copy_when_full", ctypes.c_int),
        ("interruptible", ctypes.c_int),
    ]


class BatchStruct(ctypes.Structure):
    """presto_batch_t (pointers as c_void_p so that they read as plain ints)"""
    _fields_ = [
        ("index", ctypes.c_uint64),
        ("n", ctypes.c_uint32),
        ("h", ctypes.c_uint32),
        ("w", ctypes.c_uint32),
        ("c", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("labels", ctypes.c_void_p),
        ("layout", ctypes.c_uint32),
        ("slot_", ctypes.c_uint32),
        ("own_", ctypes.c_void_p),
        ("label_data", ctypes.c_void_p),
        ("label_dtype", ctypes.c_uint32),
        ("label_classes", ctypes.c_uint32),
        ("lengths", ctypes.c_void_p),
    ]


class StreamInfo(ctypes.Structure):
    """presto_stream_info_t"""
    _fields_ = [
        ("samples", ctypes.c_uint64),
        ("batches", ctypes.c_uint64),
        ("h", ctypes.c_uint32),
        ("w", ctypes.c_uint32),
        ("c", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("layout", ctypes.c_uint32),
        ("transport", ctypes.c_uint32),
        ("slots", ctypes.c_uint32),
        ("dataset_samples", ctypes.c_uint64),
        ("fingerprint", ctypes.c_uint64),
        ("copies", ctypes.c_uint64),
        ("label_dtype", ctypes.c_uint32),
        ("label_classes", ctypes.c_uint32),
        ("has_lengths", ctypes.c_int),
    ]


_handle = ctypes.c_void_p  # presto_t * and presto_stream_t * are opaque
# presto_ring_fn: void (*)(void *base, size_t len, void *arg)
RING_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_c_int = ctypes.c_int
_str = ctypes.c_char_p

# name: (restype, argtypes), one entry per function of presto.h.
_PROTOTYPES = {
    "presto_default_socket": (_str, []),
    "presto_strerror": (_str, [_c_int]),
    "presto_version": (_str, []),
    "presto_connect": (_c_int, [_str, ctypes.POINTER(_handle)]),
    "presto_close": (None, [_handle]),
    "presto_errmsg": (_str, [_handle]),
    "presto_stats": (_c_int, [_handle, ctypes.POINTER(ctypes.c_void_p)]),
    "presto_datasets": (_c_int, [_handle, ctypes.POINTER(ctypes.c_void_p)]),
    "presto_stream_opts_init": (None, [ctypes.POINTER(StreamOpts)]),
    "presto_stream_open": (_c_int, [_handle, ctypes.POINTER(StreamOpts),
                                    ctypes.POINTER(_handle)]),
    "presto_stream_info": (_c_int, [_handle, ctypes.POINTER(StreamInfo)]),
    "presto_stream_prefetch": (ctypes.c_uint32, [_handle]),
    "presto_next": (_c_int, [_handle, ctypes.POINTER(BatchStruct)]),
    "presto_release": (None, [_handle, ctypes.POINTER(BatchStruct)]),
    "presto_stream_skipped": (ctypes.c_uint64, [_handle]),
    "presto_batch_label_dtype": (ctypes.c_uint32, [ctypes.c_void_p]),
    "presto_batch_label_shape": (ctypes.c_uint32, [ctypes.c_void_p,
                                                   ctypes.POINTER(ctypes.c_uint64)]),
    "presto_batch_label_data": (ctypes.c_void_p, [ctypes.c_void_p]),
    "presto_batch_lengths": (ctypes.c_void_p, [ctypes.c_void_p]),
    "presto_stream_errmsg": (_str, [_handle]),
    "presto_stream_close": (None, [_handle]),
    "presto_set_ring_hooks": (None, [RING_FN, RING_FN, ctypes.c_void_p]),
}


def _candidates():
    env = os.environ.get("PRESTO_LIB")
    if env:
        return [env]  # an explicit choice: no silent fallback to another build
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.normpath(os.path.join(here, "..", "..", "..", "build", SONAME))]
    try:
        from . import _install  # written by `make install`
        paths.append(os.path.join(_install.LIBDIR, SONAME))
    except ImportError:
        pass
    found = ctypes.util.find_library("prestoclient")
    if found:
        paths.append(found)
    paths.append(SONAME)
    return paths


def load():
    """Loads libprestoclient and declares every function's prototype."""
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError("presto: cannot load libprestoclient (set PRESTO_LIB): "
                      + "; ".join(errors))


lib = load()

# free() for the JSON documents presto_stats/presto_datasets hand over.
_libc = ctypes.CDLL(None)
free = _libc.free
free.restype = None
free.argtypes = [ctypes.c_void_p]
