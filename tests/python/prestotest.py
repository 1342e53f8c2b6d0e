"""Helpers for the binding's tests: paths, a real prestod, data sets, FNV-1a.

Environment (as tests/run-tests.sh sets it): PRESTO_SRC (the repository,
default: two levels above this file), PRESTO_BUILD (default $PRESTO_SRC/build),
PRESTO_LIB (default $PRESTO_BUILD/libprestoclient.so.0), PYTHON (runs
mkdataset.py; default /usr/bin/python3), PRESTO_PHOTOS (mkdataset's photos),
PRESTO_VALGRIND=1 (run prestod under valgrind; a memory error exits 99).
Importing this module makes `import presto` load the binding of this tree.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(os.environ.get("PRESTO_SRC")
                      or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(os.environ.get("PRESTO_BUILD") or os.path.join(SRC, "build"))
PYTHON = os.environ.get("PYTHON") or "/usr/bin/python3"
VALGRIND = os.environ.get("PRESTO_VALGRIND") == "1"
SLOWDOWN = 10 if VALGRIND else 1

os.environ.setdefault("PRESTO_LIB", os.path.join(BUILD, "libprestoclient.so.0"))
sys.path.insert(0, os.path.join(SRC, "client", "python"))

# run.sh preloads a sanitizer runtime into this Python for a sanitized
# libprestoclient; children (prestod, mkdataset.py) get the caller's settings,
# and Python children that load libprestoclient too get this one's
# (PYTHON_CLIENT_ENV).
PYTHON_CLIENT_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PRESTO_CHILD_")}
for _name in ("LD_PRELOAD", "ASAN_OPTIONS"):
    _saved = os.environ.pop("PRESTO_CHILD_" + _name, None)
    if _saved is not None:
        if _saved:
            os.environ[_name] = _saved
        else:
            os.environ.pop(_name, None)


def tempdir():
    """A fresh directory under $TMPDIR (or /tmp); the caller removes it."""
    return tempfile.mkdtemp(prefix="presto-py.")


def make_dataset(out, count, classes, seed=1, min_side=48, max_side=96, grey_every=0,
                 subsampling="mixed", jobs=1):
    """An ImageFolder data set made by tests/tools/mkdataset.py."""
    subprocess.run([PYTHON, os.path.join(SRC, "tests", "tools", "mkdataset.py"),
                    "--out", out, "--count", str(count), "--classes", str(classes),
                    "--seed", str(seed), "--min", str(min_side), "--max", str(max_side),
                    "--grey-every", str(grey_every), "--subsampling", subsampling,
                    "--jobs", str(jobs)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def make_audio(out, count, seed=1, formats="wav,flac,mp3,ogg", jobs=2):
    """A spoken-words audio data set made by tests/tools/mkaudio.py (CLASS/ tree)."""
    subprocess.run([PYTHON, os.path.join(SRC, "tests", "tools", "mkaudio.py"),
                    "--out", out, "--count", str(count), "--seed", str(seed),
                    "--formats", formats, "--jobs", str(jobs)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


class Daemon:
    """A prestod on a socket in dir, started with extra args; stderr to a log."""

    READY_S = 20
    STOP_S = 10

    def __init__(self, dir, args, name="prestod"):
        self.sock = os.path.join(dir, name + ".sock")
        self.log = os.path.join(dir, name + ".log")
        cmd = [os.path.join(BUILD, "prestod"), "-s", self.sock, "-w", "2",
               "-m", "64MiB", "--cache-dir", os.path.join(dir, name + ".cache")] + list(args)
        env = None
        if VALGRIND:
            cmd = ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
                   "--errors-for-leak-kinds=definite"] + cmd
            # As the C harness does (harness.c): memcheck loses the definedness
            # of libjpeg-turbo's SIMD stores (grey JPEGs read as uninitialised
            # pixels); without SIMD the same bytes are decoded and followed.
            env = dict(os.environ, JSIMD_FORCENONE="1")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log, env=env)
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + self.READY_S * SLOWDOWN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prestod exited with %d before it was ready:\n%s"
                                   % (self.proc.returncode, self.log_text()))
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.sock)
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("prestod was not ready after %d s:\n%s"
                           % (self.READY_S * SLOWDOWN, self.log_text()))

    def log_text(self):
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        """SIGTERM; returns the exit status (SIGKILL after STOP_S: None)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(self.STOP_S * SLOWDOWN)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def remove(dir):
    shutil.rmtree(dir, ignore_errors=True)


# The suites' dataset "tiny": small images through decode, resize 40, center_crop
# {side} (offline), random_flip (online).
TINY_CONFIG = """\
datasets:
  - name: tiny
    root: {root}
    steps: [decode, {{resize: 40}}, {{center_crop: {side}}}, {{random_flip: 0.5}}]
    split: center_crop
"""


def serve(config, count, classes, seed, **fields):
    """A suite's fixture: a temporary directory with a data set of count
    images in classes classes (make_dataset) and a prestod serving it with
    config, a format string given root (JSON-quoted) and fields. Returns
    (dir, root, config path, Daemon); finish() undoes it."""
    dir = tempdir()
    root = make_dataset(os.path.join(dir, "data"), count, classes, seed=seed)
    path = os.path.join(dir, "prestod.yaml")
    with open(path, "w") as f:
        f.write(config.format(root=json.dumps(root), **fields))
    return dir, root, path, Daemon(dir, ["-c", path])


def finish(dir, *daemons):
    """The end of serve(): stops every daemon, then fails with the log of the
    first whose exit status was not 0 (a memory error under valgrind: 99),
    and removes dir. Each is stopped whatever the others did, so none is
    left running."""
    failed = []
    try:
        for d in daemons:
            status = d.stop() if d else 0
            if status != 0:
                failed.append("prestod exited with %r:\n%s" % (status, d.log_text()))
    finally:
        remove(dir)
    if failed:
        raise AssertionError("\n".join(failed))


def prestoctl(sock, *args):
    """Runs build/prestoctl -s sock ARGS; returns (exit status, stdout, stderr)."""
    r = subprocess.run([os.path.join(BUILD, "prestoctl"), "-s", sock] + list(args),
                       capture_output=True, text=True, timeout=60 * SLOWDOWN)
    return r.returncode, r.stdout, r.stderr


FNV_INIT = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
MASK64 = (1 << 64) - 1


def fnv1a64(h, data):
    """FNV-1a 64 over the bytes of data, continuing from h."""
    for byte in memoryview(data).cast("B"):
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return h


def sample_key(label, image):
    """Identifies a sample's delivery: its label and the digest of its pixels."""
    return int(label), hashlib.sha1(image.tobytes()).hexdigest()
