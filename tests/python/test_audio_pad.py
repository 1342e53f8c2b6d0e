"""Padded audio batches (issue 18): batch: {pad: longest, max_length: N}.

Spoken words of varying length (tests/tools/mkaudio.py, WAV and FLAC) go
through decode_audio (mono) -> resample 16 kHz -> mel_spectrogram 64 ->
amplitude_to_db 80, with no crop: each clip keeps its own number of frames.
The dataset's `batch: {pad: longest, max_length: M}` has prestod lay every
batch out as [N, 1, 64, T] with T the longest (after cropping to M) in that
batch, zeros after each sample's length, and the lengths tensor beside it.
Every batch is compared with torch.nn.utils.rnn.pad_sequence of torchaudio's
spectrograms (cropped to M) for the same samples, and its lengths with
theirs, on the cold epoch, from the memory tier and, after a restart, from the
disk tier; a waveform dataset (decode_audio -> resample, nothing after) the
same way. An empty WAV among the clips is a bad sample: its planned batch goes
out one short, never cut across jobs. prestoctl epoch --checksum (the C API:
presto_batch_lengths) hashes the same lengths and bytes as Python's Batch.

Both transports: tests/run-tests.sh runs the suite with PRESTO_TRANSPORT unset
(shared memory) and =socket.
"""

import json
import os
import shutil
import unittest

import numpy as np

import prestotest as pt
import presto

try:
    import torch
    import torchaudio
    import torchaudio.functional as AF
    import torchaudio.transforms as AT
except ImportError:  # the whole module skips
    torchaudio = None

COUNT = 30
BATCH = 4
RATE, MELS = 16000, 64
WAVE_MAX = 11000                      # frames: some clips are longer (cropped)
DB_TOL = 10 * np.log10(1 + 1e-4) + 2e-5
TRANSPORT = os.environ.get("PRESTO_TRANSPORT") or "auto"
BAD = "bad_empty.wav"                 # in the first class: a bad sample

CONFIG = """\
cache:
  dir: {cache}
  disk: 64MiB
datasets:
  - name: padded
    root: {root}
    steps:
      - decode_audio: {{mono: true}}
      - resample: {{rate: {rate}}}
      - mel_spectrogram: {{n_mels: {mels}}}
      - amplitude_to_db: {{top_db: 80}}
    batch: {{pad: longest, max_length: {spec_max}}}
  - name: waves
    root: {root}
    steps:
      - decode_audio: {{mono: true}}
      - resample: {{rate: {rate}}}
    batch: {{pad: longest, max_length: {wave_max}}}
  - name: pcm
    root: {root}
    steps:
      - decode_audio: {{mono: true, dtype: int16}}
    batch: {{pad: longest, max_length: {pcm_max}}}
"""

_dir = _config = _daemon = None
_files = []    # (path, label) of the good clips, in ImageFolder order
_spec = []     # torchaudio's dB mel spectrograms [1, MELS, frames], uncropped
_wave = []     # torchaudio's resampled mono waveforms [1, frames]
_pcm = []      # torchaudio.load(normalize=False) for 16-bit WAV, else round(load() x 32768)
_s16 = []      # which clips are 16-bit PCM WAV (torchaudio gives their int16 as is)
_spec_max = 0
PCM_MAX = 20000                       # frames at the file's own rate: some are cropped


def setUpModule():
    global _dir, _config, _daemon, _spec_max
    if torchaudio is None:
        raise unittest.SkipTest("torchaudio is not importable (install python3-torchaudio)")
    for tool in ("espeak-ng", "flac"):
        if shutil.which(tool) is None:
            raise unittest.SkipTest("%s is missing (make deps installs it)" % tool)
    _dir = pt.tempdir()
    root = pt.make_audio(os.path.join(_dir, "words"), COUNT, seed=11, formats="wav,flac")
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    open(os.path.join(root, classes[0], BAD), "wb").close()
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            if f != BAD:
                _files.append((os.path.join(root, c, f), label))
    mel, db = AT.MelSpectrogram(RATE, n_mels=MELS), AT.AmplitudeToDB(top_db=80)
    with open(os.path.join(root, "index.json")) as f:
        encoding = {os.path.join(root, c["path"]): (c["format"], c["encoding"])
                    for c in json.load(f)}
    for path, _ in _files:
        s16 = encoding[path] == ("wav", "s16")
        if s16:
            x, _ = torchaudio.load(path, normalize=False)
            assert x.dtype == torch.int16
            x = x.float()
        else:
            x = torchaudio.load(path)[0] * 32768
        _pcm.append(torch.round(x.mean(0, keepdim=True)).clamp(-32768, 32767)
                    .to(torch.int16).unsqueeze(0))
        _s16.append(s16)
        x, sr = torchaudio.load(path)
        x = AF.resample(x.mean(0, keepdim=True), sr, RATE)
        _wave.append(x)
        _spec.append(db(mel(x)))
    # The slot's bound: below the longest spectrogram, so some are cropped.
    frames = sorted(s.shape[-1] for s in _spec)
    _spec_max = frames[-4]
    _config = os.path.join(_dir, "prestod.yaml")
    with open(_config, "w") as f:
        f.write(CONFIG.format(root=json.dumps(root), rate=RATE, mels=MELS,
                              spec_max=_spec_max, wave_max=WAVE_MAX, pcm_max=PCM_MAX,
                              cache=json.dumps(os.path.join(_dir, "cache"))))
    _daemon = pt.Daemon(_dir, ["-c", _config])


def tearDownModule():
    if _dir:
        pt.finish(_dir, _daemon)


def epoch(name, seed=5):
    """Every batch of one shuffled epoch: (images, labels, lengths, skipped)."""
    client = presto.Client(_daemon.sock)
    try:
        with client.stream(name, batch_size=BATCH, seed=seed, transport=TRANSPORT) as s:
            out = [(np.array(b.images), np.array(b.labels), np.array(b.lengths))
                   for b in s]
            return out, s.skipped, s.info
    finally:
        client.close()


class PaddedBatches(unittest.TestCase):
    def match(self, refs, cap, batches, what, tol, exact=None):
        """Each delivered batch equals pad_sequence of the reference samples
        it holds: a sample is identified by its label, length and content (the
        closest reference of that label and length). Returns the indices of
        the references delivered, in order."""
        seen = []
        for images, labels, lengths in batches:
            n = images.shape[0]
            self.assertEqual(lengths.dtype, np.int64)
            self.assertEqual(lengths.shape, (n,))
            self.assertEqual(images.shape[-1], int(lengths.max()), what)
            picked = []
            for i in range(n):
                cands = [k for k, (p, l) in enumerate(_files) if l == labels[i] and
                         min(refs[k].shape[-1], cap) == lengths[i] and k not in seen]
                self.assertTrue(cands, (what, i, labels[i], lengths[i]))
                L = int(lengths[i])
                k = min(cands, key=lambda k: float(np.abs(
                    images[i, ..., :L].astype(np.float64) -
                    refs[k][..., :L].numpy()).max()))
                picked.append(k)
                seen.append(k)
            # torch's reference batch: the samples (time last) cropped to the
            # cap, padded with zeros to the batch's longest.
            seqs = [refs[k][..., :cap].movedim(-1, 0) for k in picked]
            want = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True).movedim(1, -1)
            self.assertEqual(images.shape, tuple(want.shape), what)
            np.testing.assert_array_equal(
                lengths, [min(refs[k].shape[-1], cap) for k in picked], what)
            for i in range(n):  # exactly zero after each sample's length
                self.assertFalse(np.any(images[i, ..., int(lengths[i]):]), what)
            self.assertEqual(images.dtype, want.numpy().dtype, what)
            err = np.abs(images.astype(np.float64) - want.numpy())
            self.assertLessEqual(float(err.max()), tol, what)
            if exact:  # these samples bit for bit
                for i, k in enumerate(picked):
                    if exact[k]:
                        np.testing.assert_array_equal(images[i], want[i].numpy(), what)
        return seen

    def check_epoch(self, what):
        batches, skipped, info = epoch("padded")
        self.assertEqual(skipped, 1, what)
        self.assertTrue(info.lengths)
        self.assertEqual(info.shape, (1, MELS, _spec_max))  # the slot's bound
        sizes = [b[0].shape[0] for b in batches]
        # one planned batch is one short (the empty WAV), none cut across jobs
        self.assertEqual(sum(sizes), len(_files), what)
        self.assertEqual(len(batches), (len(_files) + 1 + BATCH - 1) // BATCH, what)
        self.assertEqual(max(sizes), BATCH, what)
        # T is each batch's own longest: it varies, and shorter samples are padded
        self.assertGreater(len(set(b[0].shape[-1] for b in batches)), 1, what)
        self.assertTrue(any(b[2].min() < b[2].max() for b in batches), what)
        # dB values within the fidelity tolerance (relative 1e-4 on power);
        # the padding is compared exactly (zeros) in match().
        seen = self.match(_spec, _spec_max, batches, what, tol=2e-3)
        self.assertEqual(sorted(seen), list(range(len(_files))), what)
        cropped = sum(s.shape[-1] > _spec_max for s in _spec)
        self.assertGreater(cropped, 0)
        return batches

    def check_formats(self):
        """The cold epoch's decodes, counted per format (stats.formats.wav,
        .flac: decoded, failed, bytes), in JSON and in Prometheus's text."""
        c = presto.Client(_daemon.sock)
        try:
            formats = c.stats()["formats"]
        finally:
            c.close()
        for ext in ("wav", "flac"):
            files = [p for p, _ in _files if p.endswith("." + ext)]
            got = formats[ext]
            self.assertEqual(got["decoded"], len(files), (ext, got))
            self.assertEqual(got["failed"], int(ext == "wav"), (ext, got))  # the empty WAV
            self.assertEqual(got["bytes"], sum(os.path.getsize(p) for p in files), ext)
        for ext in ("ogg", "mp3"):
            self.assertEqual(formats[ext]["decoded"], 0, ext)
        rc, out, err = pt.prestoctl(_daemon.sock, "stats", "--format", "prometheus")
        self.assertEqual(rc, 0, err)
        want = 'presto_format_decoded_total{format="flac"} %d' % formats["flac"]["decoded"]
        self.assertIn(want, out.splitlines())

    def test_1_cold_warm_disk(self):
        global _daemon
        cold = self.check_epoch("cold")
        self.check_formats()
        warm = self.check_epoch("warm (memory tier)")
        for a, b in zip(cold, warm):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
        self.assertEqual(_daemon.stop(), 0, _daemon.log_text())
        _daemon = pt.Daemon(_dir, ["-c", _config])  # the same cache directory
        disk = self.check_epoch("restarted (disk tier)")
        for a, b in zip(cold, disk):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
        c = presto.Client(_daemon.sock)
        try:
            ds = next(d for d in c.stats()["datasets"] if d["name"] == "padded")
        finally:
            c.close()
        self.assertGreaterEqual(ds["disk"]["hits"], len(_files))

    def test_2_waveforms(self):
        batches, skipped, info = epoch("waves", seed=9)
        self.assertEqual(skipped, 1)
        self.assertEqual(info.shape, (1, 1, WAVE_MAX))
        self.assertTrue(any(w.shape[-1] > WAVE_MAX for w in _wave))
        # resample: within 1e-5 of torchaudio's (the fidelity suite's bound)
        waves = [w.unsqueeze(0) for w in _wave]  # [1, 1, T]: C, h 1, T
        seen = self.match(waves, WAVE_MAX, batches, "waves", tol=1e-5)
        self.assertEqual(sorted(seen), list(range(len(_files))))

    def test_4_int16(self):
        """decode_audio {dtype: int16}: 16-bit WAV as torchaudio.load(
        normalize=False) gives it, bit for bit; other encodings their float
        samples x 32768 rounded (within 1: torch's channel mean and ours may
        round apart); int16 to numpy and torch."""
        batches, skipped, info = epoch("pcm", seed=4)
        self.assertEqual(skipped, 1)
        self.assertEqual(info.dtype, np.int16)
        self.assertEqual(info.shape, (1, 1, PCM_MAX))
        self.assertTrue(any(p.shape[-1] > PCM_MAX for p in _pcm))
        self.assertGreater(sum(_s16), 0)
        for images, _, _ in batches:
            self.assertEqual(images.dtype, np.int16)
        seen = self.match(_pcm, PCM_MAX, batches, "int16", tol=1, exact=_s16)
        self.assertEqual(sorted(seen), list(range(len(_files))))
        client = presto.Client(_daemon.sock)
        try:
            with client.stream("pcm", batch_size=BATCH, transport=TRANSPORT) as s:
                x, _, n = next(iter(s)).tensors()
                self.assertEqual(x.dtype, torch.int16)
                self.assertEqual(x.shape[-1], int(n.max()))
        finally:
            client.close()

    def test_3_tensors_and_checksum(self):
        """Batch.tensors() gives the lengths as a third tensor; prestoctl's
        checksum (the C client's presto_batch_lengths) equals Python's."""
        client = presto.Client(_daemon.sock)
        want = pt.FNV_INIT
        try:
            with client.stream("padded", batch_size=BATCH, seed=3, epoch=1,
                               transport=TRANSPORT) as s:
                for b in s:
                    x, y, n = b.tensors()
                    self.assertEqual(n.dtype, torch.int64)
                    self.assertEqual(x.shape[-1], int(n.max()))
                    want = pt.fnv1a64(want, y.numpy().tobytes())
                    want = pt.fnv1a64(want, n.numpy().tobytes())
                    want = pt.fnv1a64(want, x.numpy().tobytes())
        finally:
            client.close()
        args = ["epoch", "padded", "-b", str(BATCH), "-e", "1", "--seed", "3", "--checksum",
                "--json"]
        if TRANSPORT != "auto":
            args += ["--transport", TRANSPORT]
        rc, out, err = pt.prestoctl(_daemon.sock, *args)
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out)["checksum"], "%016x" % want)


if __name__ == "__main__":
    unittest.main()
