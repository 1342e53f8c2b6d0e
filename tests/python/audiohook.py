"""ctypes over build/libaudiohook.so: presto's audio step functions
(daemon/steps/audio.h) called directly, for the fidelity suite.

Every function takes and returns numpy float32 arrays, channels first
(waveforms: channels x frames; spectrograms: channels x bins x frames), and
raises AudioError(rc, message) when the C function returns -errno.
"""

import ctypes
import errno
import os

import numpy as np

import prestotest as pt

LIB_PATH = os.path.join(pt.BUILD, "libaudiohook.so")

FMT = {"wav": 1, "flac": 2, "ogg": 3, "mp3": 4}
PAD = {"end": 0, "center": 1, "random": 2}
PAD_MODE = {"reflect": 0, "constant": 1, "replicate": 2, "circular": 3}
NORMALIZED = {False: 0, "window": 1, True: 1, "frame_length": 2}
MEL_SCALE = {"htk": 0, "slaney": 1}
AXIS = {"freq": 0, "time": 1}


class Buf(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_float)), ("cap", ctypes.c_size_t),
                ("channels", ctypes.c_uint32), ("bins", ctypes.c_uint32),
                ("frames", ctypes.c_uint64), ("rate", ctypes.c_uint32)]


class Limits(ctypes.Structure):
    _fields_ = [("max_seconds", ctypes.c_double), ("max_channels", ctypes.c_uint32)]


class ResampleParams(ctypes.Structure):
    _fields_ = [("rate", ctypes.c_uint32), ("lowpass_filter_width", ctypes.c_uint32),
                ("rolloff", ctypes.c_double), ("f32_kernel", ctypes.c_int)]


class SpecParams(ctypes.Structure):
    _fields_ = [("n_fft", ctypes.c_uint32), ("win_length", ctypes.c_uint32),
                ("hop_length", ctypes.c_uint32), ("power", ctypes.c_double),
                ("center", ctypes.c_int), ("pad_mode", ctypes.c_int),
                ("normalized", ctypes.c_int), ("n_mels", ctypes.c_uint32),
                ("sample_rate", ctypes.c_uint32), ("f_min", ctypes.c_double),
                ("f_max", ctypes.c_double), ("slaney_norm", ctypes.c_int),
                ("mel_scale", ctypes.c_int)]


class DbParams(ctypes.Structure):
    _fields_ = [("multiplier", ctypes.c_double), ("amin", ctypes.c_double),
                ("ref", ctypes.c_double), ("top_db", ctypes.c_double)]


class AudioError(Exception):
    def __init__(self, rc, message):
        super().__init__("%s (%s)" % (message, errno.errorcode.get(-rc, rc)))
        self.rc = rc
        self.message = message


def _abi_check(lib):
    B, S = Buf, SpecParams
    want = [ctypes.sizeof(B), B.cap.offset, B.channels.offset, B.bins.offset,
            B.frames.offset, B.rate.offset, ctypes.sizeof(Limits),
            ctypes.sizeof(ResampleParams), ctypes.sizeof(S), S.power.offset,
            S.center.offset, S.n_mels.offset, S.f_min.offset, S.slaney_norm.offset,
            ctypes.sizeof(DbParams)]
    lib.hook_abi.restype = ctypes.c_size_t
    got = [lib.hook_abi(i) for i in range(len(want))]
    if got != want:
        raise RuntimeError("audiohook: struct mirror differs from the C layout: %s != %s"
                           % (want, got))


def load():
    lib = ctypes.CDLL(LIB_PATH)
    _abi_check(lib)
    P = ctypes.POINTER
    vp = ctypes.c_void_p
    lib.audio_ctx_new.argtypes = [P(vp)]
    lib.audio_ctx_free.argtypes = [vp]
    lib.audio_ctx_error.argtypes = [vp]
    lib.audio_ctx_error.restype = ctypes.c_char_p
    lib.audio_buf_free.argtypes = [P(Buf)]
    lib.audio_decode.argtypes = [vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_int, P(Limits), P(Buf)]
    lib.audio_resample.argtypes = [vp, P(ResampleParams), P(Buf), P(Buf)]
    lib.audio_crop_pad.argtypes = [vp, P(Buf), ctypes.c_uint64, ctypes.c_int64, P(Buf)]
    lib.audio_crop_start.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                                     ctypes.c_double]
    lib.audio_crop_start.restype = ctypes.c_int64
    lib.audio_spec_new.argtypes = [P(SpecParams), P(vp), ctypes.c_char_p, ctypes.c_size_t]
    lib.audio_spec_free.argtypes = [vp]
    lib.audio_spec_apply.argtypes = [vp, vp, P(Buf), P(Buf)]
    lib.audio_db.argtypes = [vp, P(DbParams), P(Buf)]
    lib.audio_mask_span.argtypes = [ctypes.c_uint32, ctypes.c_double, ctypes.c_uint64,
                                    ctypes.c_float, ctypes.c_float, P(ctypes.c_uint64),
                                    P(ctypes.c_uint64)]
    lib.audio_mask.argtypes = [vp, P(Buf), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                               ctypes.c_float]
    lib.audio_gain.argtypes = [P(Buf), ctypes.c_double]
    return lib


class Audio:
    """One audio context (one thread's) and the functions on it."""

    def __init__(self):
        self.lib = load()
        self.ctx = ctypes.c_void_p()
        if self.lib.audio_ctx_new(ctypes.byref(self.ctx)) != 0:
            raise MemoryError()

    def close(self):
        if self.ctx:
            self.lib.audio_ctx_free(self.ctx)
            self.ctx = ctypes.c_void_p()

    def _check(self, rc):
        if rc < 0:
            raise AudioError(rc, self.lib.audio_ctx_error(self.ctx).decode())

    @staticmethod
    def _in(a, rate=0):
        """A Buf viewing a float32 C-contiguous array (the caller keeps a)."""
        b = Buf()
        b.data = a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        b.cap = 0
        b.channels = a.shape[0]
        b.bins = a.shape[1] if a.ndim == 3 else 0
        b.frames = a.shape[-1]
        b.rate = rate
        return b

    def _out(self, b):
        """A copy of an owned Buf as a numpy array, and the Buf freed."""
        shape = (b.channels, b.bins, b.frames) if b.bins else (b.channels, b.frames)
        n = int(np.prod(shape))
        a = np.ctypeslib.as_array(b.data, shape=(n,)).copy().reshape(shape) if n else \
            np.zeros(shape, np.float32)
        rate = b.rate
        self.lib.audio_buf_free(ctypes.byref(b))
        return a, rate

    def _call(self, fn, *args, out):
        try:
            self._check(fn(*args))
            return self._out(out)
        except AudioError:
            self.lib.audio_buf_free(ctypes.byref(out))
            raise

    def decode(self, data, fmt, mono=False, max_seconds=0.0, max_channels=0):
        """Bytes of a file -> (float32 channels x frames, rate)."""
        lim = Limits(max_seconds, max_channels)
        out = Buf()
        f = FMT.get(fmt, 0) if isinstance(fmt, str) else fmt
        return self._call(self.lib.audio_decode, self.ctx, data, len(data), f, int(mono),
                          ctypes.byref(lim), ctypes.byref(out), out=out)

    def resample(self, x, orig, new, lowpass_filter_width=6, rolloff=0.99, f32_kernel=False):
        x = np.ascontiguousarray(x, dtype=np.float32)
        p = ResampleParams(new, lowpass_filter_width, rolloff, int(f32_kernel))
        b, out = self._in(x, orig), Buf()
        return self._call(self.lib.audio_resample, self.ctx, ctypes.byref(p), ctypes.byref(b),
                          ctypes.byref(out), out=out)[0]

    def crop_pad(self, x, length, start):
        x = np.ascontiguousarray(x, dtype=np.float32)
        b, out = self._in(x), Buf()
        return self._call(self.lib.audio_crop_pad, self.ctx, ctypes.byref(b), length, start,
                          ctypes.byref(out), out=out)[0]

    def crop_start(self, frames, length, pad, u):
        return self.lib.audio_crop_start(frames, length, PAD[pad], u)

    def spec(self, **kw):
        return Spec(self, **kw)

    def db(self, x, stype="power", top_db=None, amin=1e-10, ref=1.0):
        x = np.array(x, dtype=np.float32, order="C")
        p = DbParams(10.0 if stype == "power" else 20.0, amin, ref,
                     -1.0 if top_db is None else top_db)
        b = self._in(x)
        self._check(self.lib.audio_db(self.ctx, ctypes.byref(p), ctypes.byref(b)))
        return x

    def mask_span(self, mask_param, p, size, u_len, u_pos):
        s, e = ctypes.c_uint64(), ctypes.c_uint64()
        self.lib.audio_mask_span(mask_param, p, size, u_len, u_pos, ctypes.byref(s),
                                 ctypes.byref(e))
        return s.value, e.value

    def mask(self, x, axis, start, end, value=0.0):
        x = np.array(x, dtype=np.float32, order="C")
        b = self._in(x)
        self._check(self.lib.audio_mask(self.ctx, ctypes.byref(b), AXIS[axis], start, end,
                                        value))
        return x

    def gain(self, x, gain_db):
        x = np.array(x, dtype=np.float32, order="C")
        b = self._in(x)
        self.lib.audio_gain(ctypes.byref(b), gain_db)
        return x


class Spec:
    """A spectrogram / mel spectrogram step with torchaudio's parameter names."""

    def __init__(self, audio, n_fft=400, win_length=None, hop_length=None, power=2.0,
                 center=True, pad_mode="reflect", normalized=False, n_mels=0,
                 sample_rate=16000, f_min=0.0, f_max=None, norm=None, mel_scale="htk"):
        self.audio = audio
        p = SpecParams(n_fft, win_length or 0, hop_length or 0, power, int(center),
                       PAD_MODE[pad_mode], NORMALIZED[normalized], n_mels, sample_rate,
                       f_min, -1.0 if f_max is None else f_max, int(norm == "slaney"),
                       MEL_SCALE[mel_scale])
        self.handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(256)
        rc = audio.lib.audio_spec_new(ctypes.byref(p), ctypes.byref(self.handle), err, 256)
        if rc < 0:
            raise AudioError(rc, err.value.decode())
        self.sample_rate = sample_rate

    def __call__(self, x, rate=None):
        x = np.ascontiguousarray(x, dtype=np.float32)
        a = self.audio
        b, out = a._in(x, rate or self.sample_rate), Buf()
        return a._call(a.lib.audio_spec_apply, self.handle, a.ctx, ctypes.byref(b),
                       ctypes.byref(out), out=out)[0]

    def close(self):
        if self.handle:
            self.audio.lib.audio_spec_free(self.handle)
            self.handle = ctypes.c_void_p()
