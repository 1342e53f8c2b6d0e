#!/usr/bin/env bash
# `make bench-sources`: only the sources cases of `make bench` (tests/bench/
# cases_sources.sh: tar-local), on the bench data set (3200 JPEGs from the photos, or
# BENCH_SAMPLES of them), printing each case's ratio against its baseline measured in
# the same run. Env: BUILD, PYTHON, PRESTO_PHOTOS, BENCH_SAMPLES.
set -euo pipefail
samples=${BENCH_SAMPLES:-3200}
# shellcheck source=bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench.sh"
# shellcheck source=cases_sources.sh
source tests/bench/cases_sources.sh

BENCH_SAMPLES=$samples
BENCH_DATA="$BUILD/bench-sources-data"
echo "== data set: $BENCH_SAMPLES JPEGs in 10 classes, made from real photos"
"$PYTHON" tests/tools/mkdataset.py --out "$BENCH_DATA" --count "$BENCH_SAMPLES" --classes 10
BENCH_DATA=$(cd "$BENCH_DATA" && pwd)
presto_init
BENCH_CASES=$PRESTO_TMP/cases.jsonl
: >"$BENCH_CASES"
bench_sources_cases "$BENCH_DATA"
"$PYTHON" - "$BENCH_CASES" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    c = json.loads(line)
    ratio = c["samples_per_s"] / c["reference_samples_per_s"]
    print("%-12s %8.1f samples/s  %s %8.1f samples/s  ratio %.3f  target %.2f  %s"
          % (c["case"], c["samples_per_s"], c["baseline"], c["reference_samples_per_s"],
             ratio, c["target"], "ok" if ratio >= c["target"] else "MISS"))
EOF
