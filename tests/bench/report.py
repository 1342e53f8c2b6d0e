#!/usr/bin/python3
"""Collects benchmark cases and writes bench.json plus a table (stdlib only).

    report.py case [--baseline NAME] CASES NAME TARGET RUN_JSON [RUN_JSON...]
        Appends one case to the JSON-lines file CASES. Each RUN_JSON is one result
        line of `prestoctl epoch --json` (or anything with samples_per_s, seconds and
        samples); the case's figure is the median run, every run is kept. TARGET is the
        ratio to the baseline (default "eval") the case should reach (0: none). Runs
        that carry their own reference (reference_samples_per_s, named by "reference")
        are measured against it instead: the ratio is the median run over the median
        reference; where every run is marked "paired" (its reference measured in the same
        round, on the same records from the same page-cache state: the disk cases), the
        ratio is the median of the runs' own ratios, their spread printed beside it.

    report.py write [--baseline FILE [--extra-baseline NAME=FILE]...] --cases CASES
                    --out BENCH_JSON [--stats FILE] [--data DIR]
        Each FILE is torch_baseline.py's output line: --baseline the "eval" one (also
        bench.json's "baseline"), --extra-baseline others that cases name (all are in
        bench.json's "baselines"); none when BENCH_ONLY ran only cases that carry their
        own reference. --stats is a `prestoctl stats` document. Writes
        BENCH_JSON and prints the table. Always exits 0 once written: a missed target
        is reported, not an error.
"""

import argparse
import json
import os
import platform
import statistics
import sys

BASELINE_NAME = "torchvision ImageFolder+DataLoader"
DEFAULT_BASELINE = "eval"
COMMAND = ("BENCH_ONLY=%s make bench" % os.environ["BENCH_ONLY"]
           if os.environ.get("BENCH_ONLY") else "make bench")


def cmd_case(argv):
    baseline = DEFAULT_BASELINE
    if len(argv) >= 2 and argv[0] == "--baseline":
        baseline, argv = argv[1], argv[2:]
    if len(argv) < 4:
        sys.exit("usage: report.py case [--baseline NAME] CASES NAME TARGET RUN_JSON "
                 "[RUN_JSON...]")
    cases_file, name, target = argv[0], argv[1], float(argv[2])
    runs = [json.loads(r) for r in argv[3:]]
    for r in runs:
        for key in ("samples_per_s", "seconds", "samples"):
            if key not in r:
                sys.exit("report.py: case %s: run has no %r: %s" % (name, key, json.dumps(r)))
    rates = sorted(r["samples_per_s"] for r in runs)
    case = {
        "case": name,
        "samples_per_s": statistics.median(rates),
        "seconds": statistics.median(r["seconds"] for r in runs),
        "samples": max(r["samples"] for r in runs),
        "skipped": sum(r.get("skipped", 0) for r in runs),
        "target": target,
        "baseline": baseline,
    }
    refs = [r["reference_samples_per_s"] for r in runs if "reference_samples_per_s" in r]
    if refs:
        case["baseline"] = runs[0].get("reference", "reference")
        case["reference_samples_per_s"] = statistics.median(refs)
        if len(refs) == len(runs) and all(r.get("paired") for r in runs):
            ratios = [r["samples_per_s"] / r["reference_samples_per_s"]
                      if r["reference_samples_per_s"] > 0 else 0.0 for r in runs]
            case["fixed_ratio"] = round(statistics.median(ratios), 3)
            case["round_ratios"] = [round(x, 3) for x in ratios]
    if len(runs) > 1:
        case["runs"] = runs
    with open(cases_file, "a") as f:
        f.write(json.dumps(case) + "\n")
    return 0


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "kernel": platform.release(), "cpu": cpu}


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_cases(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def baseline_doc(b):
    return {
        "name": BASELINE_NAME,
        "transforms": b.get("transforms", DEFAULT_BASELINE),
        "samples_per_s": b["samples_per_s"],
        "epochs": b["epochs"],
        "num_workers": b["num_workers"],
        "batch_size": b.get("batch_size"),
        "torch": b.get("torch"),
        "torchvision": b.get("torchvision"),
    }


def fmt_ratio(r):
    return "%.2fx" % r


def cmd_write(argv):
    p = argparse.ArgumentParser(prog="report.py write")
    p.add_argument("--baseline", help="the eval baseline (absent: BENCH_ONLY ran only cases "
                   "that carry their own reference)")
    p.add_argument("--extra-baseline", action="append", default=[], metavar="NAME=FILE")
    p.add_argument("--cases", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stats", help="prestoctl stats JSON")
    p.add_argument("--data", help="the data set's directory")
    a = p.parse_args(argv)

    files = {DEFAULT_BASELINE: a.baseline} if a.baseline else {}
    for item in a.extra_baseline:
        name, sep, path = item.partition("=")
        if not sep or not name:
            sys.exit("report.py: --extra-baseline wants NAME=FILE, not %r" % item)
        files[name] = path
    baselines = {name: baseline_doc(read_json(path)) for name, path in files.items()}
    base = baselines.get(DEFAULT_BASELINE)
    cases = read_cases(a.cases)
    for c in cases:
        c.setdefault("baseline", DEFAULT_BASELINE)
        if "fixed_ratio" in c:  # a case that is not a rate (profile-accuracy)
            c["ratio"] = c["fixed_ratio"]
            continue
        if "reference_samples_per_s" in c:
            rate = c["reference_samples_per_s"]
        elif c["baseline"] in baselines:
            rate = baselines[c["baseline"]]["samples_per_s"]
        else:
            sys.exit("report.py: case %s wants baseline %r, not given"
                     % (c["case"], c["baseline"]))
        c["ratio"] = round(c["samples_per_s"] / rate, 3) if rate > 0 else 0.0
    doc = {
        "machine": machine(),
        "command": COMMAND,
        "baseline": base,
        "baselines": baselines,
        "cases": cases,
    }
    if a.data:
        samples = base["epochs"][0]["samples"] if base and base["epochs"] else None
        doc["dataset"] = {"path": os.path.abspath(a.data), "samples": samples}
    if a.stats:
        s = read_json(a.stats)
        doc["presto"] = {"version": s.get("version"), "workers": s.get("workers"),
                         "cache": s.get("cache")}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.out)

    print_table(doc)
    print("wrote %s" % a.out)
    print("reproduce: %s" % COMMAND)
    return 0


def print_table(doc):
    base = doc["baseline"]
    m = doc["machine"]
    print()
    print("machine: %s, %d cores, kernel %s" % (m["cpu"], m["cores"], m["kernel"]))
    if base:
        print("baselines: %s, %d workers, batch %s (best of %d epochs)"
              % (base["name"], base["num_workers"], base["batch_size"], len(base["epochs"])))
    print()
    row = "%-18s %12s %9s  %-9s %-8s %s"
    print(row % ("case", "samples/s", "ratio", "vs", "target", ""))
    baselines = doc.get("baselines") or {}
    for name, b in baselines.items():
        print(row % ("baseline " + name, "%.1f" % b["samples_per_s"], fmt_ratio(1.0), "",
                     "", ""))
    base_samples = base["epochs"][0]["samples"] if base and base["epochs"] else None
    for c in doc["cases"]:
        target, verdict = "", ""
        if c.get("target_max"):  # lower is better
            target = "<= %gx" % c["target_max"]
            verdict = "PASS" if c["ratio"] <= c["target_max"] else "MISS"
        elif c.get("target"):
            target = ">= %gx" % c["target"]
            verdict = "PASS" if c["ratio"] >= c["target"] else "MISS"
        print(row % (c["case"], "%.1f" % c["samples_per_s"], fmt_ratio(c["ratio"]),
                     c.get("baseline", DEFAULT_BASELINE), target, verdict))
        if base_samples is not None and c["samples"] != base_samples:
            print("  note: %s served %d samples per epoch, the baseline %d"
                  % (c["case"], c["samples"], base_samples))
        if c.get("runs"):
            print("  runs: " + ", ".join("%.1f" % r["samples_per_s"] for r in c["runs"])
                  + " samples/s (median reported)")
        if c.get("round_ratios"):
            rr = c["round_ratios"]
            print("  ratio: the median of each round's own (%s; spread %.2f-%.2fx)"
                  % (", ".join("%.2f" % x for x in rr), min(rr), max(rr)))
    print()


def main(argv):
    commands = {"case": cmd_case, "write": cmd_write}
    if not argv or argv[0] not in commands:
        sys.exit(__doc__)
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
