"""Audio fidelity: presto's audio functions against torchaudio 0.13 on real speech.

The clips are spoken words made by tests/tools/mkaudio.py (espeak-ng, then
WAV in four sample encodings, FLAC, MP3 with lame and Ogg Vorbis with
oggenc; 16, 22.05, 44.1 and 48 kHz; mono and stereo). Each function of
daemon/steps/audio.h is called through build/libaudiohook.so (ctypes, see
audiohook.py) on the same input torchaudio gets, and compared:

- decode: torchaudio.load (sox for WAV, its FFmpeg fallback for the rest on
  Debian, see daemon/steps/audio_decode.c): WAV and FLAC integer PCM bit for
  bit; float WAV within 1e-7 (sox rounds through int32); MP3 and Vorbis
  (other decoders of the same standard) within DECODE_TOL; the same length,
  except Ogg, whose length must equal oggdec's (libvorbisfile: the granule
  position), which torchaudio's FFmpeg path does not always honour (the
  suite prints on how many clips); mono as load(f).mean(0, keepdim=True);
- resample within 1e-5 of functional.resample (the float32 kernel) and of
  transforms.Resample (the float64 kernel), over rate pairs and parameters;
- spectrogram / mel_spectrogram: relative error within 1e-4 wherever the
  reference is within 60 dB of the clip's peak, and within 1e-5 of the peak
  everywhere (below that the float32 reference is itself mostly rounding);
  against torchaudio run in float64 the same bound; the float32 reference's
  own error (against float64) is printed beside ours: for the linear
  spectrogram it exceeds 1e-4 itself, so there the bound against float32 is
  1.1 times that error;
- amplitude_to_db within 2e-5 dB; time_mask / frequency_mask equal to
  TimeMasking / FrequencyMasking given the same torch.rand draws; gain
  equal to functional.gain; crop and pad equal to slicing and zero padding;
- bad files (empty, truncated WAV and FLAC, wrong extension, absurd sample
  rate or length claims, garbage, over the duration and channel limits)
  are refused with -EBADMSG or -E2BIG and a message, never a crash.

Run: tests/python/run.sh -k audio_fidelity. Figures are printed (-v).
"""

import errno
import json
import os
import shutil
import subprocess
import unittest
import wave

import numpy as np

import prestotest as pt

try:
    import torch
    import torchaudio
    import torchaudio.functional as AF
    import torchaudio.transforms as AT
except ImportError:  # the whole module skips
    torchaudio = None

import audiohook

COUNT = 40          # four rounds of the ten words: every format for every word
DECODE_TOL = {"mp3": 1e-5, "ogg": 1e-6}
RESAMPLE_TOL = 1e-5
MEL_REL_TOL, MEL_PEAK_TOL = 1e-4, 1e-5
DB_TOL = 2e-5

_dir = _root = None
_clips = []          # index.json entries, with "file" (absolute path)
_audio = None
_loaded = {}         # path -> (torchaudio waveform, rate)


def setUpModule():
    global _dir, _root, _clips, _audio
    if torchaudio is None:
        raise unittest.SkipTest("torchaudio is not importable (install python3-torchaudio)")
    if os.environ.get("PRESTO_TRANSPORT") == "socket":
        raise unittest.SkipTest("no stream here: run once, with the default transport")
    for tool in ("espeak-ng", "flac", "lame", "oggenc", "oggdec"):
        if shutil.which(tool) is None:
            raise unittest.SkipTest("%s is missing (make deps installs it)" % tool)
    if not os.path.exists(audiohook.LIB_PATH):
        raise RuntimeError("%s is missing (make tests builds it)" % audiohook.LIB_PATH)
    _dir = pt.tempdir()
    _root = pt.make_audio(os.path.join(_dir, "words"), COUNT, seed=5)
    with open(os.path.join(_root, "index.json")) as f:
        _clips = json.load(f)
    for c in _clips:
        c["file"] = os.path.join(_root, c["path"])
    _audio = audiohook.Audio()


def tearDownModule():
    if _audio:
        _audio.close()
    if _dir:
        pt.remove(_dir)


def ta_load(path):
    if path not in _loaded:
        _loaded[path] = torchaudio.load(path)
    return _loaded[path]


def decode(clip, **kw):
    with open(clip["file"], "rb") as f:
        return _audio.decode(f.read(), clip["format"], **kw)


def oggdec_frames(path, tmp):
    out = os.path.join(tmp, "oggdec.wav")
    subprocess.run(["oggdec", "-Q", "-o", out, path], check=True)
    with wave.open(out) as w:
        return w.getnframes()


class DataSetTest(unittest.TestCase):
    def test_covers_formats_rates_and_channels(self):
        kinds = {(c["format"], c["encoding"].split()[0]) for c in _clips}
        print("\naudio data set: %d clips; %s; rates %s; channels %s" % (
            len(_clips), sorted(kinds), sorted({c["rate"] for c in _clips}),
            sorted({c["channels"] for c in _clips})))
        for fmt in ("wav", "flac", "mp3", "ogg"):
            self.assertEqual(sum(c["format"] == fmt for c in _clips), COUNT // 4, fmt)
        self.assertEqual(len({c["rate"] for c in _clips}), 4)
        self.assertEqual({c["channels"] for c in _clips}, {1, 2})
        for enc in ("s16", "s24", "f32", "u8"):
            self.assertIn(("wav", enc), kinds)


class DecodeTest(unittest.TestCase):
    def test_decode_matches_torchaudio_load(self):
        worst = {}
        ogg_len_differs = 0
        tmp = pt.tempdir()
        try:
            for c in _clips:
                ref, sr = ta_load(c["file"])
                ref = ref.numpy()
                got, rate = decode(c)
                self.assertEqual(rate, sr, c["path"])
                self.assertEqual(got.dtype, np.float32)
                self.assertEqual(got.shape[0], ref.shape[0], c["path"])
                fmt = c["format"]
                if fmt == "ogg":
                    self.assertEqual(got.shape[1], oggdec_frames(c["file"], tmp), c["path"])
                    ogg_len_differs += got.shape[1] != ref.shape[1]
                else:
                    self.assertEqual(got.shape, ref.shape, c["path"])
                n = min(got.shape[1], ref.shape[1])
                err = float(np.abs(got[:, :n] - ref[:, :n]).max())
                enc = c["encoding"].split()[0]
                key = "%s %s" % (fmt, enc if fmt in ("wav", "flac") else "")
                worst[key] = max(worst.get(key, 0.0), err)
                if fmt in ("wav", "flac") and enc != "f32":
                    self.assertEqual(err, 0.0, c["path"])
                elif enc == "f32":
                    self.assertLessEqual(err, 1e-7, c["path"])
                else:
                    self.assertLessEqual(err, DECODE_TOL[fmt], c["path"])
        finally:
            pt.remove(tmp)
        print("\ndecode, max |presto - torchaudio.load|: " +
              ", ".join("%s %.3g" % (k.strip(), v) for k, v in sorted(worst.items())))
        print("Ogg: %d of %d clips where torchaudio's length differs from the stream's "
              "(oggdec's, and presto's)" % (ogg_len_differs, COUNT // 4))

    def test_mono_is_the_channel_mean(self):
        stereo = [c for c in _clips if c["channels"] == 2]
        self.assertTrue(stereo)
        for c in stereo + _clips[:4]:
            ref = ta_load(c["file"])[0].mean(0, keepdim=True).numpy()
            got, _ = decode(c, mono=True)
            n = min(got.shape[1], ref.shape[1])
            self.assertEqual(got.shape[0], 1)
            tol = DECODE_TOL.get(c["format"], 0.0)
            if c["encoding"].startswith("f32"):
                tol = 1e-7
            self.assertLessEqual(float(np.abs(got[:, :n] - ref[:, :n]).max()), tol, c["path"])


class ResampleTest(unittest.TestCase):
    CASES = [  # (new rate, lowpass_filter_width, rolloff)
        (16000, 6, 0.99), (8000, 6, 0.99), (22050, 6, 0.99), (44100, 6, 0.99),
        (16000, 16, 0.9), (48000, 3, 0.95),
    ]

    def test_resample_matches_torchaudio(self):
        worst_f = worst_t = 0.0
        pairs = set()
        for i, c in enumerate(_clips):
            x, sr = ta_load(c["file"])
            for new, lpw, rolloff in self.CASES[:4] if i % 3 else self.CASES:
                if new == sr:
                    continue
                pairs.add((sr, new))
                ref_f = AF.resample(x, sr, new, lowpass_filter_width=lpw, rolloff=rolloff)
                got_f = _audio.resample(x.numpy(), sr, new, lpw, rolloff, f32_kernel=True)
                self.assertEqual(got_f.shape, tuple(ref_f.shape))
                err_f = float(np.abs(got_f - ref_f.numpy()).max())
                ref_t = AT.Resample(sr, new, lowpass_filter_width=lpw, rolloff=rolloff)(x)
                got_t = _audio.resample(x.numpy(), sr, new, lpw, rolloff)
                err_t = float(np.abs(got_t - ref_t.numpy()).max())
                self.assertLessEqual(err_f, RESAMPLE_TOL, (c["path"], new, lpw, rolloff))
                self.assertLessEqual(err_t, RESAMPLE_TOL, (c["path"], new, lpw, rolloff))
                worst_f, worst_t = max(worst_f, err_f), max(worst_t, err_t)
        print("\nresample over %d rate pairs: max |err| %.3g vs functional.resample "
              "(float32 kernel), %.3g vs transforms.Resample (float64 kernel); tolerance %g"
              % (len(pairs), worst_f, worst_t, RESAMPLE_TOL))

    def test_same_rate_is_a_copy(self):
        x, sr = ta_load(_clips[0]["file"])
        np.testing.assert_array_equal(_audio.resample(x.numpy(), sr, sr), x.numpy())


def spec_error(got, ref, power):
    """(max relative error within 60 dB of the peak, max |err| / peak)."""
    peak = float(ref.max())
    floor = peak * (1e-6 if power == 2.0 else 1e-3)
    big = ref >= floor
    rel = float((np.abs(got - ref)[big] / ref[big]).max())
    return rel, float(np.abs(got - ref).max()) / peak


class SpectrogramTest(unittest.TestCase):
    CASES = [
        dict(n_fft=400, n_mels=64),  # the benchmark's MelSpectrogram(16000, n_mels=64)
        dict(n_fft=400, n_mels=0),   # Spectrogram()
        dict(n_fft=512, win_length=400, hop_length=160, f_min=20.0, f_max=7600.0, n_mels=80,
             norm="slaney", mel_scale="slaney"),
        dict(n_fft=256, hop_length=64, power=1.0, n_mels=40, normalized=True),
        dict(n_fft=1024, win_length=800, hop_length=200, n_mels=128, center=False),
        dict(n_fft=400, n_mels=64, pad_mode="constant", normalized="frame_length"),
        dict(n_fft=400, n_mels=0, power=1.0, pad_mode="replicate"),
        dict(n_fft=300, hop_length=100, n_mels=32, pad_mode="circular", f_min=100.0),
    ]

    @staticmethod
    def reference(x, **kw):
        kw = dict(kw)
        n_mels = kw.pop("n_mels")
        if n_mels == 0:
            for k in ("norm", "mel_scale", "f_min", "f_max"):
                kw.pop(k, None)
            return AT.Spectrogram(**kw)
        return AT.MelSpectrogram(16000, n_mels=n_mels, **kw)

    def test_spectrograms_match_torchaudio(self):
        lines, worst = [], []
        for kw in self.CASES:
            spec = _audio.spec(sample_rate=16000, **kw)
            t32 = self.reference(None, **kw)
            t64 = self.reference(None, **kw).double()
            rel = peak = rel32 = rel_ours64 = 0.0
            try:
                for c in _clips[::2]:
                    x, sr = ta_load(c["file"])
                    w = AF.resample(x, sr, 16000)
                    ref = t32(w).numpy()
                    got = spec(w.numpy())
                    self.assertEqual(got.shape, ref.shape, kw)
                    r, p = spec_error(got, ref, kw.get("power", 2.0))
                    ref64 = t64(w.double()).numpy()
                    rel, peak = max(rel, r), max(peak, p)
                    rel32 = max(rel32, spec_error(ref, ref64, kw.get("power", 2.0))[0])
                    rel_ours64 = max(rel_ours64, spec_error(got, ref64, kw.get("power", 2.0))[0])
            finally:
                spec.close()
            lines.append("  %s: rel %.3g (torchaudio float32 vs float64: %.3g, presto vs "
                         "float64: %.3g), |err|/peak %.3g" % (kw, rel, rel32, rel_ours64, peak))
            worst.append((rel, peak, rel32, rel_ours64, kw))
        print("\nspectrograms, max relative error within 60 dB of the peak (tolerance %g):\n%s"
              % (MEL_REL_TOL, "\n".join(lines)))
        for rel, peak, rel32, rel_ours64, kw in worst:
            if kw["n_mels"]:
                self.assertLessEqual(rel, MEL_REL_TOL, kw)
            else:
                self.assertLessEqual(rel, max(MEL_REL_TOL, 1.1 * rel32), kw)
            self.assertLessEqual(rel_ours64, MEL_REL_TOL, kw)
            self.assertLessEqual(peak, MEL_PEAK_TOL, kw)

    def test_stereo_channels_are_independent(self):
        c = next(c for c in _clips if c["channels"] == 2)
        x, sr = ta_load(c["file"])
        w = AF.resample(x, sr, 16000)
        spec = _audio.spec(n_mels=64, sample_rate=16000)
        try:
            got = spec(w.numpy())
            one = spec(w[1:].numpy())
        finally:
            spec.close()
        self.assertEqual(got.shape[0], 2)
        np.testing.assert_array_equal(got[1:], one)

    def test_refuses_what_torch_refuses(self):
        spec = _audio.spec(n_mels=64, sample_rate=16000)
        try:
            with self.assertRaises(audiohook.AudioError) as cm:
                spec(np.zeros((1, 150), np.float32))  # reflect pad 200 > 150 samples
            self.assertEqual(cm.exception.rc, -errno.EINVAL)
            with self.assertRaises(audiohook.AudioError) as cm:
                spec(np.zeros((1, 16000), np.float32), rate=22050)
            self.assertIn("resample first", cm.exception.message)
        finally:
            spec.close()
        for bad in (dict(n_fft=1), dict(win_length=500), dict(power=0.0), dict(n_mels=64,
                    f_min=9000.0), dict(n_mels=64, sample_rate=0)):
            kw = dict(n_mels=0, sample_rate=16000)
            kw.update(bad)
            with self.assertRaises(audiohook.AudioError, msg=str(bad)):
                _audio.spec(**kw)


class DbTest(unittest.TestCase):
    def test_amplitude_to_db_matches(self):
        spec = _audio.spec(n_mels=64, sample_rate=16000)
        worst = 0.0
        try:
            for c in _clips[::4]:
                x, sr = ta_load(c["file"])
                mel = spec(AF.resample(x, sr, 16000).numpy())
                for stype, top_db in (("power", None), ("power", 80.0), ("magnitude", 60.0)):
                    ref = AT.AmplitudeToDB(stype, top_db)(torch.from_numpy(mel)).numpy()
                    got = _audio.db(mel, stype, top_db)
                    err = float(np.abs(got - ref).max())
                    self.assertLessEqual(err, DB_TOL, (c["path"], stype, top_db))
                    worst = max(worst, err)
        finally:
            spec.close()
        print("\namplitude_to_db: max |err| %.3g dB (tolerance %g)" % (worst, DB_TOL))


class AugmentTest(unittest.TestCase):
    def mel(self):
        x, sr = ta_load(_clips[1]["file"])
        spec = _audio.spec(n_mels=64, sample_rate=16000)
        try:
            return spec(AF.resample(x, sr, 16000).numpy())
        finally:
            spec.close()

    def test_masks_equal_torchaudio_given_its_draws(self):
        mel = self.mel()
        cases = [("freq", AT.FrequencyMasking(27), 27, 1.0, 0.0),
                 ("time", AT.TimeMasking(40), 40, 1.0, 0.0),
                 ("time", AT.TimeMasking(100, p=0.2), 100, 0.2, -3.0),
                 ("freq", AT.FrequencyMasking(80), 80, 1.0, 1.5)]
        masked = 0
        for axis, tr, param, p, value in cases:
            size = mel.shape[1] if axis == "freq" else mel.shape[2]
            for seed in range(60):
                torch.manual_seed(seed)
                u_len, u_pos = float(torch.rand(1)), float(torch.rand(1))
                torch.manual_seed(seed)
                ref = tr(torch.from_numpy(mel), value).numpy()
                start, end = _audio.mask_span(param, p, size, u_len, u_pos)
                got = _audio.mask(mel, axis, start, end, value)
                np.testing.assert_array_equal(got, ref, str((axis, param, p, seed)))
                masked += end > start
        self.assertGreater(masked, 100)

    def test_gain_equals_functional_gain(self):
        x, _ = ta_load(_clips[2]["file"])
        for g in (-12.0, -3.5, 0.0, 0.7, 6.0):
            np.testing.assert_array_equal(_audio.gain(x.numpy(), g), AF.gain(x, g).numpy())

    def test_crop_and_pad(self):
        x = ta_load(_clips[3]["file"])[0].numpy()
        n = x.shape[1]
        for length, start in ((1000, 0), (1000, n - 1000), (n + 500, -200), (n, 0),
                              (300, -100), (500, n - 100), (200, n + 50)):
            ref = np.zeros((x.shape[0], length), np.float32)
            lo, hi = max(start, 0), min(start + length, n)
            if hi > lo:
                ref[:, lo - start:hi - start] = x[:, lo:hi]
            np.testing.assert_array_equal(_audio.crop_pad(x, length, start), ref)
        mel = self.mel()
        got = _audio.crop_pad(mel, 30, 10)
        np.testing.assert_array_equal(got, mel[:, :, 10:40])
        got = _audio.crop_pad(mel, mel.shape[2] + 7, -3)
        np.testing.assert_array_equal(got[:, :, 3:-4], mel)
        self.assertFalse(got[:, :, :3].any() or got[:, :, -4:].any())

    def test_crop_start_covers_every_offset_uniformly(self):
        self.assertEqual(_audio.crop_start(100, 100, "end", 0.999), 0)
        self.assertEqual(_audio.crop_start(10, 20, "end", 0.5), 0)
        self.assertEqual(_audio.crop_start(10, 20, "center", 0.5), -5)
        counts = np.zeros(11, int)
        for u in (np.arange(11000) + 0.5) / 11000:
            counts[_audio.crop_start(110, 100, "end", u)] += 1
            self.assertIn(-_audio.crop_start(90, 100, "random", u), range(11))
        np.testing.assert_array_equal(counts, 1000)


class BadFileTest(unittest.TestCase):
    """Every bad file is refused with an error code and a message, never a crash."""

    def clip(self, fmt, **kw):
        c = next(c for c in _clips if c["format"] == fmt and c["encoding"].startswith(
            kw.get("enc", "")))
        with open(c["file"], "rb") as f:
            return f.read()

    def refused(self, data, fmt, rc, words, **kw):
        with self.assertRaises(audiohook.AudioError) as cm:
            _audio.decode(data, fmt, **kw)
        self.assertEqual(cm.exception.rc, -rc, cm.exception.message)
        self.assertIn(words, cm.exception.message)
        return cm.exception.message

    def test_bad_files_are_refused(self):
        wav = self.clip("wav", enc="s16")
        flac = self.clip("flac")
        mp3 = self.clip("mp3")
        ogg = self.clip("ogg")
        msgs = []
        for fmt in ("wav", "flac", "ogg", "mp3"):
            msgs.append(self.refused(b"", fmt, errno.EBADMSG, "empty"))
        msgs.append(self.refused(wav[:len(wav) // 2], "wav", errno.EBADMSG, "truncated"))
        msgs.append(self.refused(flac[:len(flac) // 2], "flac", errno.EBADMSG, "truncated"))
        msgs.append(self.refused(flac, "wav", errno.EBADMSG, "wrong extension"))
        msgs.append(self.refused(wav, "mp3", errno.EBADMSG, "wrong extension"))
        msgs.append(self.refused(ogg, "flac", errno.EBADMSG, "wrong extension"))
        msgs.append(self.refused(mp3, "ogg", errno.EBADMSG, "wrong extension"))
        msgs.append(self.refused(b"\0" * 64 + ogg, "ogg", errno.EBADMSG, "no Ogg header"))
        for rate in (0, 4_000_000_000, 1_000_000):
            bad = wav[:24] + rate.to_bytes(4, "little") + wav[28:]
            msgs.append(self.refused(bad, "wav", errno.EBADMSG, "Hz"))
        bad = wav[:22] + (0).to_bytes(2, "little") + wav[24:]
        msgs.append(self.refused(bad, "wav", errno.EBADMSG, "0 channels"))
        # a data chunk that claims 100 MB in a small file: truncated
        i = wav.index(b"data")
        claim = wav[:i + 4] + (100 << 20).to_bytes(4, "little") + wav[i + 8:]
        msgs.append(self.refused(claim, "wav", errno.EBADMSG, "truncated"))
        # a FLAC STREAMINFO that claims 2^35 samples
        j = flac.index(b"fLaC") + 8 + 13
        big = bytearray(flac)
        big[j] = (big[j] & 0xf0) | 0x08
        big[j + 1:j + 5] = b"\0\0\0\0"
        msgs.append(self.refused(bytes(big), "flac", errno.E2BIG, "limit", max_seconds=600))
        rng = np.random.default_rng(3)
        msgs.append(self.refused(rng.integers(0, 256, 5000, np.uint8).tobytes(), "wav",
                                 errno.EBADMSG, "no WAV header"))
        self.assertRaises(audiohook.AudioError, _audio.decode,
                          b"ID3\x04\0\0\0\0\0\x10" + bytes(16) + b"garbage" * 50, "mp3")
        print("\nbad files, the messages:\n  " + "\n  ".join(msgs))

    def test_limits(self):
        stereo = next(c for c in _clips if c["channels"] == 2)
        with open(stereo["file"], "rb") as f:
            data = f.read()
        self.refused(data, stereo["format"], errno.E2BIG, "channels", max_channels=1)
        decode(stereo, max_channels=2)
        for fmt in ("wav", "flac", "mp3", "ogg"):
            c = next(c for c in _clips if c["format"] == fmt)
            got, rate = decode(c)
            secs = got.shape[1] / rate
            with open(c["file"], "rb") as f:
                data = f.read()
            self.refused(data, fmt, errno.E2BIG, "limit", max_seconds=secs * 0.9)
            decode(c, max_seconds=secs + 0.01)

    def test_damaged_files_never_crash(self):
        """Cut and flipped bytes of every format: decoded or refused, never a crash."""
        rng = np.random.default_rng(7)
        outcomes = {}
        for fmt in ("wav", "flac", "mp3", "ogg"):
            data = self.clip(fmt)
            for k in range(25):
                cut = rng.uniform(0.05, 1.0) if k % 2 else 1.0
                b = bytearray(data[:int(len(data) * cut)])
                for _ in range(int(rng.integers(0, 20))):
                    b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
                try:
                    x, rate = _audio.decode(bytes(b), fmt, max_seconds=60)
                    self.assertTrue(np.isfinite(x).all() or fmt == "wav")
                    outcomes[fmt, "decoded"] = outcomes.get((fmt, "decoded"), 0) + 1
                except audiohook.AudioError as e:
                    self.assertIn(e.rc, (-errno.EBADMSG, -errno.E2BIG), e.message)
                    outcomes[fmt, "refused"] = outcomes.get((fmt, "refused"), 0) + 1
        print("\ndamaged files: %s" % dict(sorted(outcomes.items())))


if __name__ == "__main__":
    unittest.main()
