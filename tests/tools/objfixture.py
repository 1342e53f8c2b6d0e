#!/usr/bin/python3
"""Object-store fixtures for the tests and `make bench`: real servers on
loopback, started and removed by the caller.

    objfixture.py s3 --s3rver DIR [--bucket NAME[/PREFIX]=LOCALDIR ...]
                     [--access-key K --secret S [--token T]] [--region R]
                     [--delay-ms N] [--fail RATE [--fail-mode 503|reset|mix]]
                     [--seed N] [--empty-bucket NAME ...] [--no-check] [--memo]
    objfixture.py http --root DIR [--direct] [--delay-ms N] [--fail RATE ...]

s3: starts s3rver (DIR is where `make deps` installed it: DIR/node_modules/
.bin/s3rver) on a free loopback port with a temporary data directory,
creates the buckets and uploads each LOCALDIR's files (keys: PREFIX/ plus
the path below LOCALDIR), then starts the proxy the clients talk to. The
proxy checks every request as S3 would: it recomputes the SigV4
signature with botocore's signer (AWS's own implementation) from the
request as received and the credentials given here, and answers 403
SignatureDoesNotMatch (or InvalidAccessKeyId, or InvalidToken for a
missing or different session token) when they differ; it then delays the
request by --delay-ms and fails a --fail fraction of them with a 503
SlowDown or a connection reset (seeded: the same run fails the same
requests), and forwards the rest to s3rver (which runs with
--allow-mismatched-signatures: the proxy did the check). Responses stream
through unchanged.

--memo (`make bench`): s3rver's CPU per GET (about 0.6 ms of node.js on
the bench machine) is the emulator's, on the cores the measured client
decodes on, which no deployment's object store is. With it, s3rver's
answer to a plain GET of a whole object (no query, no Range, no
conditional header; status 200) is kept, byte for byte, and the same GET is answered with it
from then on: after the check, the delay and the failures, like any
other. Before READY every uploaded object is fetched once, so every
client (prestod and the baselines alike) meets the same warm memo. Any
request that is not a GET or HEAD, and the put command, empty it.

http: nginx (Debian's nginx-light) serving DIR on a free loopback port
from a temporary prefix, behind the same proxy (no signature check: it
delays, fails, goes down and up on command), or with --direct nginx's own
port (no commands).

Either prints one line "READY {json}" (port, and for s3 the s3rver port)
on stdout, then reads commands on stdin, one a line, answering each with
one line:
    delay N          set the per-request delay (ms)
    fail RATE MODE   fail that fraction (MODE 503, reset or mix)
    put B/KEY FILE   (s3) replace object KEY of bucket B with FILE's bytes
    token T          require session token T ("-": none)
    down             stop accepting and drop every connection
    up               accept again, on the same port
    peak             start max_in_flight (requests answered at once) afresh
    stats            "STATS {json}": requests, forwarded, denied, failed,
                     max_in_flight, memo_hits (and with --memo, memo:
                     the objects kept)
    quit             (or end of input) stop everything and clean up
Exit status: 0 after quit, 77 when a server cannot be had (s3rver not
installed, node or nginx missing), with the reason on stderr.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SKIP = 77
S3RVER_KEY = "S3RVER"  # the account s3rver knows; the proxy checks the secret


def skip(msg):
    print(f"objfixture: {msg}", file=sys.stderr, flush=True)
    sys.exit(SKIP)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- the signature check ----

def s3_error(status, code, message, resource=""):
    from xml.sax.saxutils import escape
    resource = escape(resource)  # a query's '&' is not XML
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><Resource>{resource}</Resource>"
            f"<RequestId>0</RequestId></Error>").encode()
    reason = {403: "Forbidden", 503: "Service Unavailable", 400: "Bad Request",
              412: "Precondition Failed"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body


class Checker:
    """Recomputes SigV4 signatures with botocore."""

    def __init__(self, access_key, secret, token, region):
        from botocore.auth import S3SigV4Auth
        from botocore.credentials import Credentials
        self.access_key, self.token, self.region = access_key, token, region
        self.auth_cls = S3SigV4Auth
        self.creds = Credentials(access_key, secret, token)

    def set_token(self, token):
        from botocore.credentials import Credentials
        self.token = token
        self.creds = Credentials(self.access_key, self.creds.secret_key, token)

    def check(self, method, target, headers):
        """None when the request is signed right, else an error response."""
        from botocore.awsrequest import AWSRequest
        auth = headers.get("authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return s3_error(403, "AccessDenied", "Access Denied", target)
        fields = {}
        for part in auth[len("AWS4-HMAC-SHA256 "):].split(","):
            k, _, v = part.strip().partition("=")
            fields[k] = v
        cred = fields.get("Credential", "").split("/")
        if len(cred) != 5 or cred[0] != self.access_key:
            return s3_error(403, "InvalidAccessKeyId",
                            "The AWS Access Key Id you provided does not exist in our records.",
                            target)
        if self.token is not None and headers.get("x-amz-security-token") != self.token:
            return s3_error(403, "InvalidToken", "The provided token is malformed or otherwise invalid.",
                            target)
        amz_date = headers.get("x-amz-date", "")
        signed = fields.get("SignedHeaders", "").split(";")
        if (cred[1] != amz_date[:8] or cred[2] != self.region or cred[3] != "s3"
                or "host" not in signed or "x-amz-content-sha256" not in headers):
            return s3_error(403, "AuthorizationHeaderMalformed",
                            "The authorization header is malformed.", target)
        req = AWSRequest(method=method, url="http://" + headers["host"] + target,
                         headers={h: headers.get(h, "") for h in signed})
        req.context["timestamp"] = amz_date
        signer = self.auth_cls(self.creds, "s3", self.region)
        canonical = signer.canonical_request(req)
        want = signer.signature(signer.string_to_sign(req, canonical), req)
        if want != fields.get("Signature"):
            return s3_error(403, "SignatureDoesNotMatch",
                            "The request signature we calculated does not match the "
                            "signature you provided. Check your key and signing method.",
                            target)
        return None


# ---- the proxy ----

# request headers that make a GET's answer other than the whole object's
MEMO_VARY = frozenset(("range", "if-match", "if-none-match", "if-modified-since",
                       "if-unmodified-since", "x-amz-server-side-encryption-customer-key"))

async def read_head(reader):
    """Reads an HTTP head; returns (first line, [(name, value)], raw) or None at EOF."""
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    first = lines[0]
    hdrs = []
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            hdrs.append((k.strip(), v.strip()))
    return first, hdrs, raw


async def read_body(reader, hdrs, status=None, method=None):
    """The body's bytes as they come (Content-Length or chunked)."""
    h = {k.lower(): v for k, v in hdrs}
    if method == "HEAD" or status in (204, 304) or (status is not None and 100 <= status < 200):
        return b""
    if h.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            out += line
            n = int(line.split(b";")[0], 16)
            chunk = await reader.readexactly(n + 2)
            out += chunk
            if n == 0:
                return bytes(out)
    n = int(h.get("content-length", "0"))
    return await reader.readexactly(n) if n else b""


class Proxy:
    def __init__(self, upstream_port, checker, delay_ms, fail_rate, fail_mode, seed):
        self.upstream_port = upstream_port
        self.checker = checker
        self.delay_ms = delay_ms
        self.fail_rate, self.fail_mode = fail_rate, fail_mode
        self.rng = random.Random(seed)
        self.server = None
        self.port = None
        self.conns = set()
        self.pool = []
        self.stats = {"requests": 0, "forwarded": 0, "denied": 0, "failed_503": 0,
                      "failed_reset": 0, "connections": 0, "precondition_failed": 0,
                      "in_flight": 0, "max_in_flight": 0, "memo_hits": 0}
        self.put = None  # s3: put(bucket, key, path) replaces an object
        self.memo = None  # --memo: {target: (head, body)} of whole-object GETs
        self.memo_gen = 0  # counts the memo's emptyings: an answer older is not kept

    async def start(self, port=0):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", port,
                                                 reuse_address=True, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self):
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for w in list(self.conns):
            abort(w)
        self.conns.clear()

    async def upstream(self, fresh=False):
        """A connection to s3rver: a pooled one idle for less than its
        keep-alive (5 s), or a new one."""
        now = asyncio.get_running_loop().time()
        while self.pool and not fresh:
            r, w, t = self.pool.pop()
            if now - t < 3.0 and not w.is_closing():
                return r, w
            w.close()
        return await asyncio.open_connection("127.0.0.1", self.upstream_port)

    async def handle(self, reader, writer):
        self.conns.add(writer)
        self.stats["connections"] += 1
        try:
            while True:
                try:
                    first, hdrs, raw = await read_head(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, target, _ = first.split(" ", 2)
                body = await read_body(reader, hdrs, method=method)
                self.stats["requests"] += 1
                self.stats["in_flight"] += 1
                self.stats["max_in_flight"] = max(self.stats["max_in_flight"],
                                                  self.stats["in_flight"])
                try:
                    if not await self.answer(reader, writer, method, target, hdrs, raw, body):
                        return
                finally:
                    self.stats["in_flight"] -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.conns.discard(writer)
            writer.close()

    async def answer(self, reader, writer, method, target, hdrs, raw, body):
        """One request: False when the connection is to go."""
        h = {k.lower(): v for k, v in hdrs}
        denied = self.checker.check(method, target, h) if self.checker else None
        if self.delay_ms:
            await asyncio.sleep(self.delay_ms / 1000)
        if denied is not None:
            self.stats["denied"] += 1
            writer.write(denied)
            await writer.drain()
            return True
        if self.fail_rate and self.rng.random() < self.fail_rate:
            mode = self.fail_mode
            if mode == "mix":
                mode = self.rng.choice(["503", "reset"])
            if mode == "reset":
                self.stats["failed_reset"] += 1
                abort(writer)
                return False
            self.stats["failed_503"] += 1
            writer.write(s3_error(503, "SlowDown", "Please reduce your request rate.",
                                  target))
            await writer.drain()
            return True
        if self.memo is not None:
            if method == "GET" and "?" not in target and not MEMO_VARY.intersection(h):
                hit = self.memo.get(target)
                if hit is not None:
                    writer.write(hit[0])
                    writer.write(hit[1])
                    await writer.drain()
                    self.stats["forwarded"] += 1
                    self.stats["memo_hits"] += 1
                    return True
                await self.forward(raw, body, method, writer, None, memo_key=target)
                return True
            if method not in ("GET", "HEAD"):
                self.memo_clear()  # an object may change
        await self.forward(raw, body, method, writer, h.get("if-match"))
        return True

    def memo_clear(self):
        if self.memo is not None:
            self.memo.clear()
            self.memo_gen += 1

    async def forward(self, raw, body, method, writer, if_match=None, memo_key=None):
        gen = self.memo_gen
        for attempt in range(2):  # a pooled connection the server closed: a new one
            up_r, up_w = await self.upstream(fresh=attempt > 0)
            try:
                up_w.write(raw + body)
                await up_w.drain()
                first, hdrs, head = await read_head(up_r)
                break
            except (asyncio.IncompleteReadError, ConnectionError):
                up_w.close()
                if attempt:
                    raise
        status = int(first.split(" ")[1])
        resp_body = await read_body(up_r, hdrs, status=status, method=method)
        etag = next((v for k, v in hdrs if k.lower() == "etag"), None)
        if if_match is not None and 200 <= status < 300 and if_match not in ("*", etag):
            # S3 (and nginx) answer a GET whose If-Match is not the
            # object's ETag so; s3rver does not check it: done here
            self.stats["precondition_failed"] += 1
            head, resp_body = s3_error(412, "PreconditionFailed",
                                       "At least one of the pre-conditions you specified "
                                       "did not hold"), b""
        writer.write(head + resp_body)
        await writer.drain()
        self.stats["forwarded"] += 1
        close = any(k.lower() == "connection" and v.lower() == "close" for k, v in hdrs)
        if memo_key is not None and status == 200 and not close and gen == self.memo_gen:
            self.memo[memo_key] = (head, resp_body)
        if close:
            up_w.close()
        else:
            self.pool.append((up_r, up_w, asyncio.get_running_loop().time()))


def abort(writer):
    """Closes a connection with a reset (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


# ---- s3rver ----

def die_with_fixture():
    """A preexec_fn: the server gets SIGTERM when this fixture dies, even by
    SIGKILL. check kills a failed case's process group, and the servers run in
    sessions of their own, so without it a failed case left them running."""
    import ctypes
    parent = os.getpid()

    def pre():
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)
    return pre


def start_s3rver(install_dir, data_dir):
    exe = Path(install_dir) / "node_modules" / ".bin" / "s3rver"
    if not exe.exists():
        skip(f"s3rver is not installed in {install_dir} (make deps installs it from npm)")
    if shutil.which("node") is None:
        skip("node is not installed (make deps installs Debian's nodejs)")
    # s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its
    # legacy provider: Node 17 and later must be told to load it.
    env = dict(os.environ)
    try:
        major = int(subprocess.run(["node", "--version"], capture_output=True,
                                   text=True).stdout.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError):
        major = 0
    if major >= 17:
        env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
    proc = subprocess.Popen([str(exe), "-d", data_dir, "-a", "127.0.0.1", "-p", "0",
                             "--allow-mismatched-signatures", "--no-vhost-buckets", "--silent"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, preexec_fn=die_with_fixture())
    line = b""
    while b"listening on" not in line:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            skip(f"s3rver did not start (exit {proc.returncode})")
    port = int(line.decode().strip().rsplit(":", 1)[1])
    # keep draining its output so it never blocks on a full pipe
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, port


def upload(port, specs, empty):
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                      aws_access_key_id=S3RVER_KEY, aws_secret_access_key=S3RVER_KEY,
                      config=Config(s3={"addressing_style": "path"},
                                    max_pool_connections=16))
    made = set()
    jobs = []
    for spec in specs:
        target, _, local = spec.partition("=")
        bucket, _, prefix = target.partition("/")
        if bucket not in made:
            s3.create_bucket(Bucket=bucket)
            made.add(bucket)
        root = Path(local)
        for p in sorted(root.rglob("*")):
            if p.is_file():
                key = (prefix.rstrip("/") + "/" if prefix else "") + str(p.relative_to(root))
                jobs.append((bucket, key, p))
    for bucket in empty:
        if bucket not in made:
            s3.create_bucket(Bucket=bucket)
            made.add(bucket)
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda j: s3.put_object(Bucket=j[0], Key=j[1], Body=j[2].read_bytes()), jobs))
    return len(jobs), s3


async def memo_fill(proxy, a):
    """--memo: every object fetched once through the proxy (signed as the
    clients sign), so that the memo is warm for every client alike."""
    import boto3
    from botocore.config import Config

    def fetch_all():
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{proxy.port}",
                          region_name=a.region, aws_access_key_id=a.access_key,
                          aws_secret_access_key=a.secret, aws_session_token=a.token,
                          config=Config(s3={"addressing_style": "path"},
                                        max_pool_connections=8))
        keys = []
        for spec in a.bucket:
            bucket, _, prefix = spec.partition("=")[0].partition("/")
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=prefix):
                keys += [(bucket, o["Key"]) for o in page.get("Contents", [])]
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda k: s3.get_object(Bucket=k[0], Key=k[1])["Body"].read(), keys))
        return len(keys)

    delay, proxy.delay_ms = proxy.delay_ms, 0
    fail, proxy.fail_rate = proxy.fail_rate, 0.0
    try:
        n = await asyncio.get_running_loop().run_in_executor(None, fetch_all)
    finally:
        proxy.delay_ms, proxy.fail_rate = delay, fail
    if len(proxy.memo) != n:
        raise RuntimeError(f"--memo: {len(proxy.memo)} of {n} objects kept")
    proxy.stats.update(requests=0, forwarded=0, memo_hits=0, connections=0, max_in_flight=0)


# ---- nginx ----

def start_nginx(root):
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        skip("nginx is not installed (make deps installs Debian's nginx-light)")
    prefix = tempfile.mkdtemp(prefix="presto-nginx-")
    for attempt in range(5):
        port = free_port()
        conf = f"""
daemon off;
master_process off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
{"user root;" if os.geteuid() == 0 else ""}
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    types {{ }}
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        root {os.path.abspath(root)};
        location / {{ }}
    }}
}}
"""
        Path(prefix, "nginx.conf").write_text(conf)
        proc = subprocess.Popen([exe, "-p", prefix, "-c", f"{prefix}/nginx.conf"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=die_with_fixture())
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                return proc, port, prefix
            except OSError:
                if proc.poll() is not None:
                    break
                threading.Event().wait(0.02)
        proc.kill()
        proc.wait()
    err = Path(prefix, "error.log").read_text() if Path(prefix, "error.log").exists() else ""
    shutil.rmtree(prefix, ignore_errors=True)
    skip(f"nginx did not start: {err.strip()[-300:]}")


# ---- main ----

async def commands(proxy, done):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line or line == "quit":
            break
        words = line.split()
        try:
            answer = await command(proxy, words, line)
        except Exception as e:  # a bad command must not stop the fixture
            answer = f"ERR {line}: {e}"
        print(answer, flush=True)
    done.set_result(None)


async def command(proxy, words, line):
    if proxy is None:
        return "STATS {}" if words[0] == "stats" else "ERR http fixtures take no commands"
    if words[0] == "delay" and len(words) == 2:
        proxy.delay_ms = int(words[1])
    elif words[0] == "fail" and len(words) in (2, 3):
        proxy.fail_rate = float(words[1])
        proxy.fail_mode = words[2] if len(words) == 3 else proxy.fail_mode
    elif words[0] == "token" and len(words) == 2 and proxy.checker:
        proxy.checker.set_token(None if words[1] == "-" else words[1])
    elif words[0] == "down":
        await proxy.down()
    elif words[0] == "up":
        if proxy.server is None:
            await proxy.start(proxy.port)
    elif words[0] == "put" and len(words) == 3 and proxy.put:
        bucket, _, key = words[1].partition("/")
        proxy.memo_clear()
        await asyncio.get_running_loop().run_in_executor(None, proxy.put, bucket, key,
                                                         words[2])
    elif words[0] == "peak":  # max_in_flight from now on
        proxy.stats["max_in_flight"] = proxy.stats["in_flight"]
    elif words[0] == "stats":
        memo = {"memo": len(proxy.memo)} if proxy.memo is not None else {}
        return "STATS " + json.dumps({**proxy.stats, **memo})
    else:
        return f"ERR unknown command: {line}"
    return "OK"


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    s3 = sub.add_parser("s3")
    s3.add_argument("--s3rver", required=True)
    s3.add_argument("--bucket", action="append", default=[])
    s3.add_argument("--empty-bucket", action="append", default=[])
    s3.add_argument("--access-key", default=S3RVER_KEY)
    s3.add_argument("--secret", default="presto-test-secret")
    s3.add_argument("--token")
    s3.add_argument("--region", default="us-east-1")
    s3.add_argument("--delay-ms", type=int, default=0)
    s3.add_argument("--fail", type=float, default=0.0)
    s3.add_argument("--fail-mode", default="503", choices=["503", "reset", "mix"])
    s3.add_argument("--seed", type=int, default=1)
    s3.add_argument("--no-check", action="store_true", help="forward without the signature check")
    s3.add_argument("--memo", action="store_true",
                    help="answer whole-object GETs with s3rver's first answer (see above)")
    http = sub.add_parser("http")
    http.add_argument("--root", required=True)
    http.add_argument("--direct", action="store_true", help="nginx's port, no proxy")
    http.add_argument("--delay-ms", type=int, default=0)
    http.add_argument("--fail", type=float, default=0.0)
    http.add_argument("--fail-mode", default="503", choices=["503", "reset", "mix"])
    http.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    procs, temps = [], []
    try:
        if a.mode == "http":
            proc, port, prefix = start_nginx(a.root)
            procs.append(proc)
            temps.append(prefix)
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            if a.direct:
                print("READY " + json.dumps({"port": port}), flush=True)
                done = loop.create_future()
                loop.run_until_complete(commands(None, done))
                return 0
            # the same proxy as S3's, without the signature check: delay,
            # fail, down and up for HTTP too
            proxy = Proxy(port, None, a.delay_ms, a.fail, a.fail_mode, a.seed)
            loop.run_until_complete(proxy.start())
            print("READY " + json.dumps({"port": proxy.port, "nginx_port": port}), flush=True)
            done = loop.create_future()
            cmd_task = loop.create_task(commands(proxy, done))  # held: asyncio keeps tasks weakly
            loop.run_until_complete(cmd_task)
            loop.run_until_complete(proxy.down())
            return 0
        try:
            import botocore  # noqa: F401
            import boto3  # noqa: F401
        except ImportError:
            skip("python3-botocore and python3-boto3 are needed")
        data = tempfile.mkdtemp(prefix="presto-s3rver-")
        temps.append(data)
        proc, s3port = start_s3rver(a.s3rver, data)
        procs.append(proc)
        n, s3c = upload(s3port, a.bucket, a.empty_bucket)
        checker = None if a.no_check else Checker(a.access_key, a.secret, a.token, a.region)
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        proxy = Proxy(s3port, checker, a.delay_ms, a.fail, a.fail_mode, a.seed)
        proxy.put = lambda b, k, path: s3c.put_object(Bucket=b, Key=k,
                                                       Body=Path(path).read_bytes())
        loop.run_until_complete(proxy.start())
        if a.memo:
            proxy.memo = {}
            loop.run_until_complete(memo_fill(proxy, a))
        print("READY " + json.dumps({"port": proxy.port, "s3rver_port": s3port, "objects": n}),
              flush=True)
        done = loop.create_future()
        cmd_task = loop.create_task(commands(proxy, done))  # held: asyncio keeps tasks weakly
        loop.run_until_complete(cmd_task)
        loop.run_until_complete(proxy.down())
        return 0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for t in temps:
            shutil.rmtree(t, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
