"""The label tensor on the wire, seen by the client library and the Python
binding, against a scripted daemon (a hostile or an older one included).

A real prestod only makes soft labels after mixup/cutmix (test_mix.py serves
those end to end); this daemon in a thread says any label format in OPENED
and sends whatever BATCH it is told to, on the socket and through a shared
memory ring, so the client's side of every format is checked on its own:

- float32 [n, K] soft targets and int64 [n] lengths reach numpy and torch
  as (n, K) float32 and (n,) int64 views, on both transports;
- an OPENED without the label fields (a daemon from before them) gives
  int64 [n] labels;
- a BATCH whose label block does not match the OPENED's format, an OPENED
  with a format no daemon may say, and a BATCH_SHM whose labels do not fit
  are refused as malformed, with the stream failing and nothing crashing.
"""

import os
import socket
import struct
import tempfile
import threading
import unittest

import numpy as np

import presto

MAGIC, VERSION = 0x54535250, 1
OPEN, OPENED, BATCH, END, BATCH_SHM, RELEASE = 6, 7, 8, 9, 15, 16
U8, F32, I64 = 1, 2, 4
H, W, C = 2, 3, 1
SAMPLE = H * W * C


def frame(ftype, req_id, body):
    return struct.pack("<IHHIII", MAGIC, VERSION, ftype, 0, req_id, len(body)) + body


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def opened(n, batches, transport=0, slots=4, slot_bytes=0, labels=None, info=True):
    body = struct.pack("<IQQIIIIIIIQ", 1, n * batches, batches, H, W, C, U8, 0, transport,
                       slots, slot_bytes)
    if info or labels is not None:
        body += struct.pack("<QQ", n * batches, 0x1234)
    if labels is not None:
        body += struct.pack("<III", *labels)
    return body


def soft_block(index, n, k, lengths):
    t = np.arange(n * k, dtype=np.float32).reshape(n, k) / 8 + index
    block = t.tobytes()
    ln = None
    if lengths:
        ln = np.arange(n, dtype=np.int64) + 100 * (index + 1)
        block += ln.tobytes()
    return t, ln, block


def pixels(index, n):
    return (np.arange(n * SAMPLE, dtype=np.uint8) + index).tobytes()


class FakeDaemon:
    """Accepts connections; on an OPEN runs script(conn, req_id) in the
    connection's thread. The control connection presto_connect makes stays
    idle."""

    def __init__(self, script):
        self.dir = tempfile.mkdtemp(prefix="presto-labels-")
        self.path = os.path.join(self.dir, "fake.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.script = script
        self.conns = []
        self.errors = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            while True:
                hdr = recv_exact(conn, 20)
                if hdr is None:
                    return
                magic, version, ftype, _, req_id, blen = struct.unpack("<IHHIII", hdr)
                body = recv_exact(conn, blen) if blen else b""
                if ftype == OPEN:
                    flags = struct.unpack_from("<I", body, len(body) - 8)[0]
                    if not flags & 0x20:
                        self.errors.append("OPEN without PROTO_OPEN_LABELS")
                    self.script(conn, req_id)
        except OSError:
            pass
        except Exception as e:  # the test reads them
            self.errors.append(repr(e))

    def close(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        os.unlink(self.path)
        os.rmdir(self.dir)


class LabelTensorTest(unittest.TestCase):
    N, K, BATCHES = 4, 5, 3

    def run_fake(self, script, transport="socket", **kw):
        d = FakeDaemon(script)
        try:
            with presto.Client(d.path) as c:
                with c.stream("x", batch_size=self.N, transport=transport, **kw) as s:
                    info = s.info
                    got = []
                    for b in s:
                        got.append((b.index, b.images.copy(), b.labels.copy(),
                                    None if b.lengths is None else b.lengths.copy(),
                                    [t.clone() for t in b.tensors()]))
                        del b
            self.assertEqual(d.errors, [])
            return info, got
        finally:
            d.close()

    def soft_socket(self, lengths):
        n, k = self.N, self.K

        def script(conn, req_id):
            conn.sendall(frame(OPENED, req_id, opened(n, self.BATCHES,
                                                      labels=(F32, k, int(lengths)))))
            for i in range(self.BATCHES):
                _, _, block = soft_block(i, n, k, lengths)
                fixed = struct.pack("<IQIIIII", 1, i, n, H, W, C, U8)
                conn.sendall(frame(BATCH, req_id, fixed + block + pixels(i, n)))
            conn.sendall(frame(END, req_id, struct.pack("<IQQQ", 1, self.BATCHES,
                                                        n * self.BATCHES, 0)))
        return script

    def check_soft(self, info, got, lengths):
        import torch
        n, k = self.N, self.K
        self.assertEqual(info.label_dtype, np.dtype(np.float32))
        self.assertEqual(info.label_shape, (k,))
        self.assertEqual(info.lengths, lengths)
        self.assertEqual(len(got), self.BATCHES)
        for i, (index, images, labels, lens, tensors) in enumerate(got):
            want_t, want_l, _ = soft_block(i, n, k, lengths)
            self.assertEqual(index, i)
            self.assertEqual(images.shape, (n, H, W, C))
            np.testing.assert_array_equal(images.reshape(-1),
                                          np.frombuffer(pixels(i, n), np.uint8))
            self.assertEqual(labels.dtype, np.float32)
            self.assertEqual(labels.shape, (n, k))
            np.testing.assert_array_equal(labels, want_t)
            self.assertEqual(len(tensors), 3 if lengths else 2)
            self.assertEqual(tensors[1].dtype, torch.float32)
            self.assertTrue(torch.equal(tensors[1], torch.from_numpy(want_t)))
            if lengths:
                np.testing.assert_array_equal(lens, want_l)
                self.assertEqual(tensors[2].dtype, torch.int64)
                self.assertTrue(torch.equal(tensors[2], torch.from_numpy(want_l)))
            else:
                self.assertIsNone(lens)

    def test_soft_labels_socket(self):
        for lengths in (False, True):
            with self.subTest(lengths=lengths):
                info, got = self.run_fake(self.soft_socket(lengths))
                self.check_soft(info, got, lengths)

    def test_soft_labels_shm(self):
        n, k, slots = self.N, self.K, 2
        slot_bytes = 4096

        def script(conn, req_id):
            fd = os.memfd_create("fake-ring")
            os.ftruncate(fd, slots * slot_bytes)
            ring = os.fdopen(fd, "r+b", buffering=0)
            socket.send_fds(conn, [frame(OPENED, req_id,
                                         opened(n, self.BATCHES, transport=1, slots=slots,
                                                slot_bytes=slot_bytes, labels=(F32, k, 1)))],
                            [ring.fileno()])
            for i in range(self.BATCHES):
                slot = i % slots
                if i >= slots:  # the client released it before this one
                    hdr = recv_exact(conn, 20)
                    blen = struct.unpack("<IHHIII", hdr)[5]
                    recv_exact(conn, blen)
                ring.seek(slot * slot_bytes)
                ring.write(pixels(i, n))
                _, _, block = soft_block(i, n, k, True)
                fixed = struct.pack("<IQIIIIIIQ", 1, i, n, H, W, C, U8, slot,
                                    slot * slot_bytes)
                conn.sendall(frame(BATCH_SHM, req_id, fixed + block))
            conn.sendall(frame(END, req_id, struct.pack("<IQQQ", 1, self.BATCHES,
                                                        n * self.BATCHES, 0)))
            ring.close()

        info, got = self.run_fake(script, transport="shm")
        self.assertEqual(info.transport, "shm")
        self.check_soft(info, got, True)

    def test_older_daemon_int64(self):
        """An OPENED without the label fields: int64 [n] labels, no lengths."""
        n = self.N

        def script(conn, req_id):
            conn.sendall(frame(OPENED, req_id, opened(n, 1)))
            fixed = struct.pack("<IQIIIII", 1, 0, n, H, W, C, U8)
            labels = np.arange(n, dtype=np.int64) * 7
            conn.sendall(frame(BATCH, req_id, fixed + labels.tobytes() + pixels(0, n)))
            conn.sendall(frame(END, req_id, struct.pack("<IQQQ", 1, 1, n, 0)))

        info, got = self.run_fake(script)
        self.assertEqual(info.label_dtype, np.dtype(np.int64))
        self.assertEqual(info.label_shape, ())
        self.assertFalse(info.lengths)
        self.assertEqual(len(got), 1)
        np.testing.assert_array_equal(got[0][2], np.arange(n, dtype=np.int64) * 7)
        self.assertIsNone(got[0][3])

    def expect_malformed(self, script, transport="socket", what="malformed"):
        with self.assertRaises(presto.PrestoError) as cm:
            self.run_fake(script, transport=transport)
        self.assertEqual(cm.exception.code, presto.E_PROTO, str(cm.exception))
        self.assertIn(what, str(cm.exception))

    def test_hostile_daemon(self):
        n, k = self.N, self.K

        def int64_block_for_soft(conn, req_id):  # OPENED says soft; BATCH has int64 rows
            conn.sendall(frame(OPENED, req_id, opened(n, 1, labels=(F32, k, 0))))
            fixed = struct.pack("<IQIIIII", 1, 0, n, H, W, C, U8)
            conn.sendall(frame(BATCH, req_id, fixed + bytes(8 * n) + pixels(0, n)))

        def short_block(conn, req_id):  # one float short of n x K
            conn.sendall(frame(OPENED, req_id, opened(n, 1, labels=(F32, k, 1))))
            fixed = struct.pack("<IQIIIII", 1, 0, n, H, W, C, U8)
            _, _, block = soft_block(0, n, k, True)
            conn.sendall(frame(BATCH, req_id, fixed + block[4:] + pixels(0, n)))

        def huge_classes(conn, req_id):  # a format no daemon may say
            conn.sendall(frame(OPENED, req_id, opened(n, 1, labels=(F32, 1 << 21, 0))))

        def int64_with_classes(conn, req_id):
            conn.sendall(frame(OPENED, req_id, opened(n, 1, labels=(I64, 3, 0))))

        self.expect_malformed(int64_block_for_soft, what="BATCH")
        self.expect_malformed(short_block, what="BATCH")
        self.expect_malformed(huge_classes, what="OPENED")
        self.expect_malformed(int64_with_classes, what="OPENED")

    def test_hostile_daemon_shm(self):
        """BATCH_SHM whose labels are not n rows of the format, or more rows
        than the batch size."""
        n, k, slot_bytes = self.N, self.K, 4096

        def make(rows_extra):
            def script(conn, req_id):
                fd = os.memfd_create("fake-ring")
                os.ftruncate(fd, 2 * slot_bytes)
                socket.send_fds(conn, [frame(OPENED, req_id,
                                             opened(n, 1, transport=1, slots=2,
                                                    slot_bytes=slot_bytes,
                                                    labels=(F32, k, 0)))], [fd])
                os.close(fd)
                m = n + rows_extra
                fixed = struct.pack("<IQIIIIIIQ", 1, 0, n, H, W, C, U8, 0, 0)
                conn.sendall(frame(BATCH_SHM, req_id, fixed + bytes(4 * k * m)))
            return script

        self.expect_malformed(make(1), transport="shm", what="BATCH_SHM")   # n + 1 rows
        self.expect_malformed(make(-1), transport="shm", what="BATCH_SHM")  # n - 1 rows

        def ragged(conn, req_id):  # not a whole number of rows
            fd = os.memfd_create("fake-ring")
            os.ftruncate(fd, 2 * slot_bytes)
            socket.send_fds(conn, [frame(OPENED, req_id,
                                         opened(n, 1, transport=1, slots=2,
                                                slot_bytes=slot_bytes,
                                                labels=(F32, k, 0)))], [fd])
            os.close(fd)
            fixed = struct.pack("<IQIIIIIIQ", 1, 0, n, H, W, C, U8, 0, 0)
            conn.sendall(frame(BATCH_SHM, req_id, fixed + bytes(4 * k * n - 4)))

        self.expect_malformed(ragged, transport="shm", what="BATCH_SHM")


if __name__ == "__main__":
    unittest.main()
