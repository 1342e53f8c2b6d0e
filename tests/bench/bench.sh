#!/usr/bin/env bash
# `make bench`: presto against torchvision's ImageFolder + DataLoader on 3200 JPEGs
# made from real photos. Writes $BUILD/bench.json and prints a table.
#
# Env: BUILD (default build), PYTHON (default /usr/bin/python3), PRESTO_PHOTOS.
#
# Adding a case: pull epochs with presto_ctl (or anything printing the same JSON line)
# and pass the result lines to bench_case NAME TARGET_RATIO RUN_JSON...; the case's
# figure is the median of its runs. Exits non-zero only when something crashed; a
# missed target is printed as MISS.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../tools/demo.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tools/demo.sh"
cd "$PRESTO_ROOT"

BENCH_SAMPLES=3200
BENCH_CLASSES=10
BENCH_WARM_EPOCHS=(1 2 3)

bench_case() {
    "$PYTHON" tests/bench/report.py case "$BENCH_CASES" "$@"
}

# bench_epoch EPOCH [ARGS...]: pulls one epoch of the bench data set, prints a
# summary line and leaves prestoctl's JSON line in BENCH_RESULT.
bench_epoch() {
    local epoch=$1
    shift
    BENCH_RESULT=$(presto_ctl epoch bench -e "$epoch" --json "$@")
    "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); print(
        "  epoch %d: %.1f samples/s (%d samples, %.2f s, %d skipped)"
        % (r["epoch"], r["samples_per_s"], r["samples"], r["seconds"], r["skipped"]))' \
        "$BENCH_RESULT"
}

bench_main() {
    local data="$BUILD/bench-data" stats
    local warm=()
    for prog in prestod prestoctl; do
        [[ -x $BUILD/$prog ]] || { echo "error: $BUILD/$prog is missing; run make" >&2; exit 1; }
    done

    echo "== data set: $BENCH_SAMPLES JPEGs in $BENCH_CLASSES classes, made from real photos"
    "$PYTHON" tests/tools/mkdataset.py --out "$data" --count "$BENCH_SAMPLES" \
        --classes "$BENCH_CLASSES"
    data=$(cd "$data" && pwd)

    presto_init
    BENCH_CASES=$PRESTO_TMP/cases.jsonl
    : >"$BENCH_CASES"

    echo "== baseline: torchvision ImageFolder + DataLoader ($(nproc) workers, batch 64)"
    "$PYTHON" tests/bench/torch_baseline.py "$data" >"$PRESTO_TMP/baseline.json" \
        || presto_fail "the torchvision baseline failed"
    "$PYTHON" - "$PRESTO_TMP/baseline.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))
for i, e in enumerate(b["epochs"]):
    print("  epoch %d: %.1f samples/s (%d samples, %.2f s)"
          % (i, e["samples_per_s"], e["samples"], e["seconds"]))
EOF

    echo "== presto: prestod -d bench=$data (default workers)"
    presto_start -d "bench=$data"

    echo "== cold-c: epoch 0, cache empty"
    bench_epoch 0
    bench_case cold-c 2 "$BENCH_RESULT"

    echo "== warm-c: epochs ${BENCH_WARM_EPOCHS[*]} from the cache (median reported)"
    for e in "${BENCH_WARM_EPOCHS[@]}"; do
        bench_epoch "$e"
        warm+=("$BENCH_RESULT")
    done
    bench_case warm-c 20 "${warm[@]}"

    stats=$(presto_ctl stats)
    printf '%s\n' "$stats" >"$PRESTO_TMP/stats.json"
    presto_stop

    "$PYTHON" tests/bench/report.py write --baseline "$PRESTO_TMP/baseline.json" \
        --cases "$BENCH_CASES" --stats "$PRESTO_TMP/stats.json" --data "$data" \
        --out "$BUILD/bench.json"
}

bench_main "$@"
