#!/usr/bin/env python3
"""The profiler's predictions against the epochs they predict.

    profile_accuracy.py --build BUILD --data DIR --tmp DIR [--steps YAML]
                        [--profile JSON] [--samples N] [--only NAME,...] [--epochs N]
                        [--out JSON] [--label NAME] [--merge JSON ...]
                        [--case-file CASES --case NAME --target R]

1. Unless --profile names a profile's JSON (prestoctl profile --json) already made,
   a prestod serving DIR as `bench` with STEPS and `split: auto` (a disk tier of 64 GiB,
   the default memory budget) is profiled: `prestoctl profile bench --json`.
2. For each strategy of it (or those --only names), in a prestod of its own serving the
   same data with that split and encoding, on an empty cache directory:
     cold    epoch 0: the dataset read, run through the offline steps, stored, admitted
             to memory and delivered (the first epoch after the profile);
     memory  the cold epoch's records written back (fdatasync: its write-back is not left
             to run under the warm epochs), then warm epochs from the memory tier
             (at least N: --epochs, and as many as last MIN_WARM_S = 1 s in all:
             warm_epochs), pulled one after the other by one prestoctl as a
             training loop does (median); epoch 1, the first of that
             client, is kept aside (memory_first): it also maps and faults in the new
             connection's shared-memory ring (first_batch_s ~36 ms against ~3 ms for the
             epochs after it, center_crop/raw on 800 photos), a cost per connection the
             profile's per-epoch rates do not include, which alone is 40% of a 3,200-sample
             epoch at 50k samples/s (when more than one prestoctl is needed to reach
             1 s, the first epoch of each is kept aside: memory_aside);
     disk    the daemon restarted on the same cache directory with a memory budget of
             1 MiB (nothing admitted), the segment files written back and dropped from
             the page cache before each epoch, then warm epochs (median; at least N
             and 1 s of them, as from memory). For split 0
             ("none": nothing is stored) the source files are dropped instead. A disk
             tier read with O_DIRECT (stats: disk.direct_io) bypasses the page cache:
             its epochs follow each other on one connection, the first kept aside
             (disk_first, disk_aside) as from memory.
   Each rate's epochs, their seconds in all and their spread ((p90 - p10) / median)
   are kept in the JSON (memory_runs, memory_s, memory_spread; disk_*).
   and the disk tier's bytes after the cold epoch (stats).
3. Prints predicted against measured side by side, each figure's ratio
   max(p/m, m/p) and the prediction's interval (+-: the profile's repetitions' spread and
   the model's own error for the kind of figure, combined; the spread alone is kept in
   the JSON), how many measured rates fell inside their interval, and
   the worst ratio of them all; with --out writes it all as JSON; with --case-file
   appends make bench's case (report.py: its ratio is the worst, the target a maximum).
   --label NAME prefixes this run's strategies ("audio decode_audio/raw"); --merge takes
   the rows of earlier runs' --out files into the worst ratio, the JSON and the case, so
   one case covers several pipelines (make bench: the eval images and the audio clips).

Every epoch is pulled by prestoctl epoch (C client, shared memory, batch 64), as the
other cases of `make bench` are. Exits 1 when a daemon or an epoch failed.
"""
import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

STEPS = "[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]"


class Daemon:
    def __init__(self, build, tmp, conf, log):
        self.build, self.sock = build, os.path.join(tmp, "prestod.sock")
        self.samples = 0  # an epoch's, once one was pulled
        self.logf = open(log, "ab")
        self.proc = subprocess.Popen([os.path.join(build, "prestod"), "-s", self.sock, "-c",
                                      conf], stdout=self.logf, stderr=self.logf)
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                sys.exit("profile_accuracy: prestod exited (%s)" % log)
            if os.path.exists(self.sock) and self.ctl("datasets", check=False) is not None:
                break
            if time.time() > deadline:
                self.stop()
                sys.exit("profile_accuracy: prestod did not start (%s)" % log)
            time.sleep(0.05)

    def ctl(self, *args, check=True):
        r = subprocess.run([os.path.join(self.build, "prestoctl"), "-s", self.sock, *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            if check:
                self.stop()
                sys.exit("profile_accuracy: prestoctl %s: %s" % (" ".join(args), r.stderr))
            return None
        return r.stdout

    def epochs(self, first, n):
        out = self.ctl("epoch", "bench", "-e", str(first), "-n", str(n), "--json")
        runs = [json.loads(line) for line in out.splitlines() if line.strip()]
        if runs:
            self.samples = runs[0]["samples"]
        for r in runs:
            if r["skipped"]:
                print("  warning: epoch %d skipped %d samples" % (r["epoch"], r["skipped"]))
        return runs

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def config(path, data, steps, split, encoding, cache, memory=None):
    with open(path, "w") as f:
        f.write("cache:\n  dir: %s\n  disk: 64GiB\n" % cache)
        if memory:
            f.write("  memory: %s\n" % memory)
        f.write("datasets:\n  - name: bench\n    root: %s\n    steps: %s\n    split: %s\n"
                "    encoding: %s\n" % (data, steps, split, encoding))
    return path


def writeback(paths, evict=False):
    """Writes the files' dirty pages back; with evict, drops them from the page cache."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
        except OSError:
            pass
        if evict:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def drop(paths):
    writeback(paths, evict=True)


# Warm epochs, from memory or from the disk tier: at least --epochs of them, and as
# many as last MIN_WARM_S in all (their own seconds, as prestoctl times them): a
# 3,200-sample epoch at 80k samples/s lasts 40 ms, a 600-clip audio epoch from the
# disk tier at 15k samples/s 40 ms and from memory at 800k samples/s under 1 ms, and
# the median of three such is one scheduler hiccup away from a different figure.
# The first round's count comes from the predicted rate; rounds after it from the
# epochs measured so far, until MIN_WARM_S is reached (MAX_WARM_ROUNDS at most, none
# over MAX_WARM_S by the measured rate). Each round is one prestoctl, as a training
# loop is, and its first epoch is kept aside (it maps and faults in the new
# connection's ring, a cost per connection; see memory_first above).
MIN_WARM_S = 1.0
MAX_WARM_S = 3.0
MAX_WARM_ROUNDS = 4
MAX_WARM_EPOCHS = 5000  # a round's count, whatever the rates say


def warm_count(n, rate, samples, have_s=0.0):
    """Epochs still wanted after have_s seconds of them: at least n, as many as
    fill MIN_WARM_S at rate (samples/s), none past MAX_WARM_S."""
    if rate <= 0 or samples <= 0:
        return n
    per = samples / rate
    want = int((MIN_WARM_S - have_s) / per + 0.999)
    return max(n, min(want, int(MAX_WARM_S / per), MAX_WARM_EPOCHS))


def warm_epochs(d, first, n, predicted_rate):
    """Warm epochs from `first` on, in rounds of one connection each (warm_count).
    Returns (kept epochs, the rounds' first epochs kept aside)."""
    kept, aside, e = [], [], first
    samples = d.samples
    count = warm_count(n, predicted_rate, samples)
    for _ in range(MAX_WARM_ROUNDS):
        runs = d.epochs(e, count + 1)
        e += len(runs)
        aside.append(runs[0])
        kept += runs[1:]
        have = sum(r["seconds"] for r in kept)
        if have >= MIN_WARM_S:
            break
        rate = statistics.median(r["samples_per_s"] for r in kept)
        count = warm_count(1, rate, samples, have)
    return kept, aside


def spread(rates):
    """(p90 - p10) / median of a row's epochs: how much they disagree."""
    if len(rates) < 2:
        return 0.0
    q = statistics.quantiles(rates, n=10, method="inclusive")
    return (q[-1] - q[0]) / statistics.median(rates)


# The machine's speed at a moment: JPEG decodes per second of a fixed set of the data's
# files (PIL, one thread, REF_S seconds). Taken when the profile runs and before each
# strategy's epochs, its ratio tells "the machine was slower then" (other processes on
# the cores, a noisy neighbour) apart from the model's error; reported beside each row,
# never divided out.
REF_S = 0.3
REF_FILES = 16


def reference(data):
    from PIL import Image
    files = sorted(p for p in source_files(data)
                   if p.lower().endswith((".jpg", ".jpeg")))[:REF_FILES]
    if not files:
        return None
    blobs = [open(p, "rb").read() for p in files]
    import io
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < REF_S:
        Image.open(io.BytesIO(blobs[n % len(blobs)])).load()
        n += 1
    return n / (time.perf_counter() - t0)


def direct_io(d):
    """Whether the daemon's disk tier reads with O_DIRECT (its stats)."""
    out = d.ctl("stats", check=False)
    try:
        return bool(json.loads(out)["disk"]["direct_io"]) if out else False
    except (ValueError, KeyError):
        return False


def source_files(data):
    return [p for p in glob.glob(os.path.join(data, "**", "*"), recursive=True)
            if os.path.isfile(p)]


def segments(cache):
    return glob.glob(os.path.join(cache, "**", "seg-*"), recursive=True)



def measure(args, s, n):
    """The real epochs of strategy s: cold, memory (median), disk (median)."""
    tag = s["name"].replace("/", "-").replace(":", "")
    cache = os.path.join(args.tmp, "cache-" + tag)
    subprocess.run(["rm", "-rf", cache], check=True)
    enc = s["encoding"]
    log = os.path.join(args.tmp, "prestod-%s.log" % tag)
    conf = config(os.path.join(args.tmp, tag + ".yaml"), args.data, args.steps, s["split"],
                  enc, cache)
    files = source_files(args.data)
    ref = reference(args.ref_data)
    drop(files)  # the cold epoch reads the files from the disk, as a first epoch does
    # Nothing else's write-back under the cold epoch: make bench's case before this
    # one (the worst strategy, decode/raw) leaves 1.8 GB of its records dirty, and
    # this epoch writes 1.8 GB more. (The rest of what slowed decode/raw's cold epoch
    # after that case, 688-845 samples/s there against 1,317 alone, was the VM's cost
    # of fresh pages for 1.8 GB of page cache behind the earlier cases' caches: the
    # disk tier now writes behind (store.c write_behind) and cases_profile.sh removes
    # each case's cache.)
    os.sync()
    d = Daemon(args.build, args.tmp, conf, log)
    try:
        cold = d.epochs(0, 1)[0]
        # The warm epochs measure the tier, not the first epoch's write-back still in
        # flight (up to 1.8 GiB of records being written by the kernel's flusher while
        # epochs of 80 ms run): the records are written back first.
        writeback(segments(cache))
        mem, mem_aside = warm_epochs(d, 1, n, s.get("memory_samples_per_s", 0))

    finally:
        d.stop()
    stored = 0
    for seg in segments(cache):
        stored += os.path.getsize(seg)
    conf = config(os.path.join(args.tmp, tag + "-disk.yaml"), args.data, args.steps,
                  s["split"], enc, cache, memory="1MiB")
    d = Daemon(args.build, args.tmp, conf, log)
    disk, disk_aside = [], []
    d.samples = cold["samples"]
    try:
        if s["split"] > 0 and direct_io(d):
            # O_DIRECT: the records never enter the page cache, so the epochs follow
            # each other on one connection as a trainer's do, the first kept aside as
            # from memory (it faults in the connection's ring: ~70 ms, 15% of a
            # 3,200-sample epoch at 8k samples/s, a cost per connection).
            drop(segments(cache))
            disk, disk_aside = warm_epochs(d, 1, n, s.get("disk_samples_per_s", 0))
        else:
            # Through the page cache: each epoch after its files are dropped, on a
            # connection of its own, until MIN_WARM_S of them (at most MAX_WARM_S).
            e = 1
            while True:
                have = sum(r["seconds"] for r in disk)
                if len(disk) >= max(n, 1) and (have >= MIN_WARM_S or
                                               have + disk[-1]["seconds"] > MAX_WARM_S):
                    break
                drop(files if s["split"] == 0 else segments(cache))
                disk += d.epochs(e, 1)
                e += 1
    finally:
        d.stop()
    subprocess.run(["rm", "-rf", cache], check=True)
    return {
        "cold": cold["samples_per_s"],
        "memory": statistics.median(r["samples_per_s"] for r in mem),
        "memory_runs": [r["samples_per_s"] for r in mem],
        "memory_s": sum(r["seconds"] for r in mem),
        "memory_spread": spread([r["samples_per_s"] for r in mem]),
        "memory_first": mem_aside[0]["samples_per_s"],
        "memory_first_batch_s": mem_aside[0].get("first_batch_s", 0),
        "memory_aside": [r["samples_per_s"] for r in mem_aside],
        "disk": statistics.median(r["samples_per_s"] for r in disk),
        "disk_runs": [r["samples_per_s"] for r in disk],
        "disk_s": sum(r["seconds"] for r in disk),
        "disk_spread": spread([r["samples_per_s"] for r in disk]),
        "disk_first": disk_aside[0]["samples_per_s"] if disk_aside else None,
        "disk_aside": [r["samples_per_s"] for r in disk_aside],
        "stored_bytes": stored,
        "samples": cold["samples"],
        "reference": ref,
    }


SPREAD = {"memory": "memory_spread", "disk": "disk_spread", "cold": "cold_spread"}
# The interval each predicted rate carries (its spread and the model's error for the
# kind of figure, combined: profile.h PROFILE_ERR_*); "inside" counts against it.
INTERVAL = {"memory": "memory_interval", "disk": "disk_interval", "cold": "cold_interval"}

FIGURES = [  # (key of the measurement, key of the profile's prediction, label)
    ("memory", "memory_samples_per_s", "warm mem/s"),
    ("disk", "disk_samples_per_s", "warm disk/s"),
    ("cold", "cold_samples_per_s", "cold/s"),
    ("stored_bytes", "total_bytes", "stored MB"),
]


def interval(row, mk):
    """The prediction's interval (0.45: +-45%); a profile without one: its spread."""
    iv = row.get("interval", {}).get(mk)
    return iv if iv is not None else (row.get("spread", {}).get(mk, 0) or 0)


def inside(row, mk):
    """Whether the measured figure lies in the prediction's interval p +- interval."""
    p, m = row["predicted"][mk], row["measured"][mk]
    iv = interval(row, mk)
    return p * (1 - iv) <= m <= p * (1 + iv)


def ratio(p, m):
    if not p or not m or p <= 0 or m <= 0:
        return float("inf")
    return max(p / m, m / p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--steps", default=STEPS)
    ap.add_argument("--profile")
    ap.add_argument("--only")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--case-file")
    ap.add_argument("--case", default="profile-accuracy")
    ap.add_argument("--target", type=float, default=1.25)
    ap.add_argument("--label", default="")
    ap.add_argument("--merge", action="append", default=[])
    ap.add_argument("--reference", type=float, default=0,
                    help="the machine's speed (--speed) when the profile ran")
    ap.add_argument("--ref-data", help="JPEGs for the speed reference (default: --data)")
    ap.add_argument("--speed", action="store_true",
                    help="print the machine's speed reference for --data and exit")
    args = ap.parse_args()
    args.ref_data = os.path.abspath(args.ref_data or args.data)
    if args.speed:
        print("%.1f" % (reference(args.ref_data) or 0))
        return
    args.data = os.path.abspath(args.data)
    os.makedirs(args.tmp, exist_ok=True)

    if not args.profile:
        cache = os.path.join(args.tmp, "cache-profile")
        subprocess.run(["rm", "-rf", cache], check=True)
        conf = config(os.path.join(args.tmp, "profile.yaml"), args.data, args.steps, "auto",
                      "raw", cache)
        d = Daemon(args.build, args.tmp, conf, os.path.join(args.tmp, "prestod-profile.log"))
        args.profile = os.path.join(args.tmp, "profile.json")
        try:
            t0 = time.time()
            extra = ["--samples", str(args.samples)] if args.samples else []
            ref0 = reference(args.ref_data)
            d.ctl("profile", "bench", "--quiet", "--json", args.profile, *extra)
            ref1 = reference(args.ref_data)
            args.reference = (ref0 + ref1) / 2 if ref0 and ref1 else 0
            print("== profile: %.1f s" % (time.time() - t0))
        finally:
            d.stop()
        subprocess.run(["rm", "-rf", cache], check=True)
    prof = json.load(open(args.profile))
    only = set(args.only.split(",")) if args.only is not None else None  # "": none
    rows = []
    for s in prof["strategies"]:
        if only and s["name"] not in only:
            continue
        m = measure(args, s, args.epochs)
        name = (args.label + " " if args.label else "") + s["name"]
        row = {"name": name, "split": s["split"], "encoding": s["encoding"],
               "measured": m, "predicted": {}, "ratio": {}}
        if args.reference and m.get("reference"):
            # > 1: the machine was faster when this strategy's epochs ran than when
            # the profile ran (not divided out of anything).
            row["machine_speed_vs_profile"] = m["reference"] / args.reference
        for mk, pk, _ in FIGURES:
            p = s.get(pk)
            if p is None:
                continue
            if mk == "stored_bytes" and s["split"] == 0:
                continue  # nothing stored
            row["predicted"][mk] = p
            sp = s.get(SPREAD.get(mk, ""), 0) or 0
            row.setdefault("spread", {})[mk] = sp
            if INTERVAL.get(mk) in s:
                row.setdefault("interval", {})[mk] = s[INTERVAL[mk]]
            row["ratio"][mk] = ratio(p, m[mk])
        rows.append(row)
        speed = row.get("machine_speed_vs_profile")
        print("  %-16s " % name + "  ".join(
            "%s %s/%s (%.2fx)" % (mk, fmt(mk, row["predicted"][mk]), fmt(mk, m[mk]),
                                  row["ratio"][mk]) for mk, _, _ in FIGURES
            if mk in row["predicted"]) +
            "".join("  %s %d epochs %.2f s +-%.0f%%" % (
                k, len(m[k + "_runs"]), m[k + "_s"], 50 * m[k + "_spread"])
                for k in ("memory", "disk")) +
            ("  machine %.2fx the profile's" % speed if speed else ""), flush=True)
    for path in args.merge:
        rows = json.load(open(path))["rows"] + rows
    worst = max((r for row in rows for r in row["ratio"].values()), default=float("inf"))
    table(rows)
    print("worst max(predicted/measured, measured/predicted): %.3f" % worst)
    rated = [(row, mk) for row in rows for mk in row["predicted"] if mk != "stored_bytes"]
    covered = sum(inside(row, mk) for row, mk in rated)
    print("measured inside the predicted +-interval: %d of %d rates" % (covered, len(rated)))
    speeds = sorted(row["machine_speed_vs_profile"] for row in rows
                    if row.get("machine_speed_vs_profile"))
    if speeds:
        print("machine speed at the epochs / at the profile (JPEG decodes/s, one thread): "
              "%.2f-%.2f, median %.2f" % (speeds[0], speeds[-1], statistics.median(speeds)))
    print("profile: %d of %d samples on %d workers, %.1f s"
          % (prof["sample_size"], prof["samples"], prof["profile_workers"], prof["seconds"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"profile": args.profile, "reference": args.reference,
                       "rows": rows, "ratio": worst,
                       "inside_interval": covered, "rates": len(rated)}, f, indent=1)
    if args.case_file:
        mem = [row["measured"]["memory"] for row in rows]
        case = {"case": args.case, "samples_per_s": statistics.median(mem) if mem else 0,
                "seconds": 0, "samples": rows[0]["measured"]["samples"] if rows else 0,
                "skipped": 0, "target": 0, "target_max": args.target,
                "fixed_ratio": round(worst, 3), "baseline": "real epochs",
                "inside_interval": covered, "rates": len(rated),
                "detail": "worst max(predicted/measured, measured/predicted) over the "
                          "strategies' warm memory, warm disk and cold epochs and stored "
                          "bytes; samples_per_s: the median strategy's warm rate",
                "strategies": rows}
        with open(args.case_file, "a") as f:
            f.write(json.dumps(case) + "\n")


def fmt(key, v):
    if key == "stored_bytes":
        return "%.1f" % (v / 1e6)
    return "%.0f" % v


def table(rows):
    width = max([18] + [len(row["name"]) + 1 for row in rows])
    hdr = "%-*s" % (width, "strategy")
    for _, _, label in FIGURES:
        hdr += " | %-30s" % (label + " predicted/measured")
    print(hdr)
    for row in rows:
        line = "%-*s" % (width, row["name"])
        for mk, _, _ in FIGURES:
            if mk in row["predicted"]:
                iv = interval(row, mk) if mk in INTERVAL else 0
                p = fmt(mk, row["predicted"][mk]) + ("+-%.0f%%" % (iv * 100) if iv else "")
                line += " | %14s %8s %5.2fx" % (p, fmt(mk, row["measured"][mk]),
                                                row["ratio"][mk])
            else:
                line += " | %-30s" % "-"
        print(line)


if __name__ == "__main__":
    main()
