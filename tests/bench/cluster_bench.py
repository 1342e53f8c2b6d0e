#!/usr/bin/python3
"""Benchmark of the cluster tier (issue 19): several prestod "nodes" on this machine.

    cluster_bench.py --build BUILD --data DIR [--nodes 3] [--servers 2] [--world 6]
                     [--epochs 2] [--out RUNS.jsonl]

The `cluster` case. NODES prestod processes stand for NODES nodes: each its own
socket, config and cache directory, a memory tier of a third (1/NODES) of the dataset's
materialized bytes, no disk tier, the default pipeline (decode, resize 256,
center_crop 224 offline; random_flip online). A world=WORLD job runs WORLD/NODES ranks
on each daemon at once (prestoctl epoch --rank R --world WORLD, all concurrently).
Epoch 0 fills the tiers; epochs 1..EPOCHS are measured: aggregate samples/s is the
dataset's samples over the wall time from the first rank's start to the last one's end.

Twice, in this run: first the baseline, the same daemons without a cluster tier (each
caching its own fixed third in memory and decoding the rest every epoch), then with
`cluster.memcached` naming SERVERS memcached servers (Debian's, on loopback ports,
-m sized for the dataset). Each measured epoch of the cluster setup is one run line
(JSON: samples_per_s, seconds, samples, reference_samples_per_s = the baseline's median,
and the cluster tier's bytes read per sample from the daemons' stats); the ratio is
the case's figure (target: 3x).

Also printed: what a 25 Gbit/s network would allow per node at those bytes per sample,
and the `cluster-second-node` figure: two daemons sharing one memcached, the first
pulls epoch 0 alone (cold: decodes everything, puts it), then the second pulls the
same epoch (everything from the cluster); the second's samples/s over the first's.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SAMPLE_BYTES = 224 * 224 * 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Memcached:
    def __init__(self, mib):
        self.port = free_port()
        cmd = ["/usr/bin/memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
               "-m", str(mib), "-t", "1"]
        if os.getuid() == 0:
            cmd += ["-u", "nobody"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("memcached did not start")

    @property
    def spec(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Node:
    def __init__(self, a, tmp, name, memory, servers):
        self.a = a
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "prestod.sock")
        conf = os.path.join(self.dir, "prestod.yaml")
        with open(conf, "w") as f:
            f.write("cache:\n  memory: %d\n  disk: 0\n  dir: %s\n" % (memory, self.dir))
            if servers:
                f.write("cluster:\n  memcached: [%s]\n" % ", ".join(servers))
            f.write("datasets:\n  - name: bench\n    root: \"%s\"\n" % a.data)
        self.log = open(os.path.join(self.dir, "prestod.log"), "w")
        self.proc = subprocess.Popen([os.path.join(a.build, "prestod"), "-s", self.sock,
                                      "-c", conf], stderr=self.log)
        deadline = time.time() + 60
        while subprocess.call(self.ctl("datasets"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("prestod did not start: see " + self.log.name)
            time.sleep(0.1)

    def ctl(self, *args):
        return [os.path.join(self.a.build, "prestoctl"), "-s", self.sock] + list(args)

    def stats(self):
        return json.loads(subprocess.check_output(self.ctl("stats")))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(60) != 0:
            raise RuntimeError("prestod exited %d: see %s" % (self.proc.returncode,
                                                               self.log.name))
        self.log.close()


def epoch(nodes, world, e):
    """All ranks of epoch e at once, WORLD/NODES per node: (samples, seconds)."""
    per = world // len(nodes)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(nodes[r // per].ctl("epoch", "bench", "-e", str(e), "--seed",
                                                  "1", "--rank", str(r), "--world", str(world),
                                                  "--json"), stdout=subprocess.PIPE)
             for r in range(world)]
    samples = 0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("prestoctl epoch failed")
        samples += json.loads(out.decode().strip().splitlines()[-1])["samples"]
    return samples, time.perf_counter() - t0


def cluster_bytes(nodes):
    return sum(n.stats()["cluster"]["bytes_read"] for n in nodes)


def computed(nodes):
    return sum(n.stats()["datasets"][0]["computed"] for n in nodes)


def setup(a, tmp, tag, samples, servers):
    memory = samples * SAMPLE_BYTES // a.nodes
    return [Node(a, tmp, "%s-%d" % (tag, k), memory, servers) for k in range(a.nodes)]


def run_setup(a, tmp, tag, samples, servers):
    nodes = setup(a, tmp, tag, samples, servers)
    rates, per_sample = [], []
    try:
        n, s = epoch(nodes, a.world, 0)
        print("  %s epoch 0: %.1f samples/s (%d samples, %.2f s; %d computed)"
              % (tag, n / s, n, s, computed(nodes)), file=sys.stderr)
        for e in range(1, a.epochs + 1):
            b0, c0 = cluster_bytes(nodes) if servers else 0, computed(nodes)
            n, s = epoch(nodes, a.world, e)
            b1, c1 = cluster_bytes(nodes) if servers else 0, computed(nodes)
            rates.append((n / s, s, n))
            per_sample.append((b1 - b0) / n)
            print("  %s epoch %d: %.1f samples/s aggregate (%d samples, %.2f s; %d computed,"
                  " %.0f cluster bytes/sample)" % (tag, e, n / s, n, s, c1 - c0,
                                                   (b1 - b0) / n), file=sys.stderr)
    finally:
        for node in nodes:
            node.stop()
    return rates, per_sample


def second_node(a, tmp, samples):
    """Two nodes, one memcached: the second's epoch 0 against the first's."""
    mc = Memcached(samples * SAMPLE_BYTES * 2 // (1 << 20) + 64)
    try:
        first = Node(a, tmp, "pair-0", 1 << 20, [mc.spec])
        second = Node(a, tmp, "pair-1", 1 << 20, [mc.spec])
        try:
            r = []
            for node in (first, second):
                out = subprocess.check_output(node.ctl("epoch", "bench", "-e", "0", "--seed",
                                                       "1", "--json"))
                r.append(json.loads(out.decode().strip().splitlines()[-1]))
        finally:
            first.stop()
            second.stop()
    finally:
        mc.stop()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", required=True)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--world", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", help="append the run lines here (else stdout)")
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    samples = sum(1 for _, _, files in os.walk(a.data) for f in files
                  if f.lower().endswith((".jpg", ".jpeg")))
    tmp = tempfile.mkdtemp(prefix="presto-cluster-bench.")
    servers = []
    try:
        print("== cluster: %d nodes (prestod), world %d, %d samples, memory 1/%d of the"
              " dataset each, no disk tier" % (a.nodes, a.world, samples, a.nodes),
              file=sys.stderr)
        base, _ = run_setup(a, tmp, "no-cluster", samples, None)
        ref = statistics.median(r[0] for r in base)
        mib = samples * SAMPLE_BYTES * 3 // 2 // a.servers // (1 << 20) + 64
        servers = [Memcached(mib) for _ in range(a.servers)]
        runs, per_sample = run_setup(a, tmp, "cluster", samples, [m.spec for m in servers])
        lines = []
        for (rate, secs, n), bps in zip(runs, per_sample):
            lines.append(json.dumps({
                "samples_per_s": rate, "seconds": secs, "samples": n,
                "reference_samples_per_s": ref, "reference": "cluster-off",
                "cluster_bytes_per_sample": bps}))
        med = statistics.median(r[0] for r in runs)
        bps = statistics.median(per_sample)
        print("  cluster: %.1f samples/s against %.1f without the cluster tier: %.2fx"
              % (med, ref, med / ref), file=sys.stderr)
        if bps > 0:
            rec = SAMPLE_BYTES + 88  # a raw record: the sample and its header
            print("  cluster tier bytes over loopback: %.0f per sample served (%d per record"
                  " fetched; the rest came from memory); a 25 Gbit/s network would carry"
                  " %.0f samples/s per node at that rate (%.0f records/s)"
                  % (bps, rec, 25e9 / 8 / bps, 25e9 / 8 / rec), file=sys.stderr)
        for m in servers:
            m.stop()
        servers = []
        pair = second_node(a, tmp, samples)
        print("  cluster-second-node: the second node's epoch %.1f samples/s against the"
              " first's (cold) %.1f: %.2fx" % (pair[1]["samples_per_s"],
                                               pair[0]["samples_per_s"],
                                               pair[1]["samples_per_s"]
                                               / pair[0]["samples_per_s"]), file=sys.stderr)
        pair_line = json.dumps({"samples_per_s": pair[1]["samples_per_s"],
                                "seconds": pair[1]["seconds"], "samples": pair[1]["samples"],
                                "reference_samples_per_s": pair[0]["samples_per_s"],
                                "reference": "first-node-cold"})
        out = open(a.out, "a") if a.out else sys.stdout
        for line in lines:
            out.write("cluster " + line + "\n")
        out.write("cluster-second-node " + pair_line + "\n")
        if a.out:
            out.close()
    finally:
        for m in servers:
            m.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
