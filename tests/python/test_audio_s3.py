"""Audio over S3 (issue 18): a bucket of clips is served as the folder is.

The clips (tests/tools/mkaudio.py: WAV, FLAC, MP3 and Ogg) are uploaded to
s3rver behind the SigV4-checking proxy (tests/tools/objfixture.py, what
test_s3 uses); prestod serves them from s3://clips/words and from the local
folder through the same pipeline (decode_audio mono -> resample 16 kHz,
padded to the longest in each batch with its lengths). Every batch from the
bucket equals the folder's, bytes and lengths, cold and again from the
memory tier, which asks S3 for nothing. Skips where s3rver cannot be had
(`make deps` installs it under build/s3rver, or $PRESTO_S3RVER).
"""

import json
import os
import shutil
import subprocess
import unittest

import numpy as np

import prestotest as pt
import presto

COUNT = 40           # four rounds of the ten words: every format
BATCH = 8
AK, SK = "S3RVER", "presto-audio-s3-secret"
TRANSPORT = os.environ.get("PRESTO_TRANSPORT") or "auto"

CONFIG = """\
source:
  endpoint: {endpoint}
datasets:
  - name: folder
    root: {root}
    steps: &clips
      - decode_audio: {{mono: true}}
      - resample: {{rate: 16000}}
    batch: {{pad: longest, max_length: 24000}}
  - name: bucket
    root: s3://clips/words
    steps: *clips
    batch: {{pad: longest, max_length: 24000}}
"""

_dir = _fx = _daemon = None
_env = {}


def setUpModule():
    global _dir, _fx, _daemon
    if shutil.which("espeak-ng") is None:
        raise unittest.SkipTest("espeak-ng is missing (make deps installs it)")
    s3rver = os.environ.get("PRESTO_S3RVER") or os.path.join(pt.SRC, "build", "s3rver")
    _dir = pt.tempdir()
    root = pt.make_audio(os.path.join(_dir, "words"), COUNT, seed=5)
    _fx = subprocess.Popen([pt.PYTHON, os.path.join(pt.SRC, "tests", "tools", "objfixture.py"),
                            "s3", "--s3rver", s3rver, "--bucket", "clips/words=" + root,
                            "--access-key", AK, "--secret", SK],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = _fx.stdout.readline()
    if not line.startswith("READY "):
        status = _fx.wait()
        pt.remove(_dir)
        if status == 77:
            raise unittest.SkipTest("s3rver cannot be had (make deps installs it)")
        raise RuntimeError("objfixture.py s3 did not start (exit %d)" % status)
    port = json.loads(line[6:])["port"]
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        _env[k] = os.environ.pop(k, None)
    for k, v in (("AWS_ACCESS_KEY_ID", AK), ("AWS_SECRET_ACCESS_KEY", SK)):
        _env[k] = os.environ.get(k)
        os.environ[k] = v
    path = os.path.join(_dir, "prestod.yaml")
    with open(path, "w") as f:
        f.write(CONFIG.format(endpoint="http://127.0.0.1:%d" % port, root=json.dumps(root)))
    _daemon = pt.Daemon(_dir, ["-c", path])


def tearDownModule():
    for k, v in _env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        if _fx and _fx.poll() is None:
            _fx.stdin.write("quit\n")
            _fx.stdin.flush()
            _fx.wait(60)
        if _fx:
            _fx.stdin.close()
            _fx.stdout.close()
    finally:
        if _dir:
            pt.finish(_dir, _daemon)


def fixture_requests():
    _fx.stdin.write("stats\n")
    _fx.stdin.flush()
    line = _fx.stdout.readline()
    return json.loads(line[6:])["requests"]


def epoch(name):
    client = presto.Client(_daemon.sock)
    try:
        with client.stream(name, batch_size=BATCH, seed=2, transport=TRANSPORT) as s:
            out = [(np.array(b.images), np.array(b.labels), np.array(b.lengths)) for b in s]
            return out, s.skipped
    finally:
        client.close()


class AudioOverS3(unittest.TestCase):
    def test_bucket_equals_folder(self):
        folder, skipped = epoch("folder")
        self.assertEqual(skipped, 0)
        self.assertEqual(sum(b[0].shape[0] for b in folder), COUNT)
        before = fixture_requests()
        for what in ("cold", "warm (memory tier)"):
            bucket, skipped = epoch("bucket")
            self.assertEqual(skipped, 0, what)
            self.assertEqual(len(bucket), len(folder), what)
            for (x, y, n), (fx, fy, fn) in zip(bucket, folder):
                np.testing.assert_array_equal(y, fy, what)
                np.testing.assert_array_equal(n, fn, what)
                np.testing.assert_array_equal(x, fx, what)
            requests = fixture_requests()
            if what == "cold":  # every clip read from the bucket once
                self.assertGreaterEqual(requests - before, COUNT, what)
            else:
                self.assertEqual(requests, before, what)
            before = requests
        c = presto.Client(_daemon.sock)
        try:
            formats = c.stats()["formats"]
        finally:
            c.close()
        for ext in ("wav", "flac", "ogg", "mp3"):  # both datasets' decodes, per format
            self.assertEqual(formats[ext]["decoded"] % 2, 0, ext)
            self.assertGreater(formats[ext]["decoded"], 0, ext)


if __name__ == "__main__":
    unittest.main()
