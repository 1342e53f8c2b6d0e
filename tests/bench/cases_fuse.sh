# shellcheck shell=bash
# `make bench` cases for slow storage, sourced by bench.sh (which provides BUILD,
# PYTHON, PRESTO_TMP, bench_case and demo.sh's presto_* helpers):
#
#   bench_fuse_cases
#
# A data set of BENCH_FUSE_SAMPLES JPEGs ($BUILD/bench-fuse-data, made from the photos)
# is mounted through $BUILD/slowfs (tests/tools/slowfs.c: a FUSE mirror that adds a
# latency to every open and every read) at 0, 5 and 20 ms per operation. On each mount,
# in the same run: torchvision's ImageFolder + DataLoader (tests/bench/torch_baseline.py,
# the eval transforms, one worker process per core, batch 64: each worker opens and reads
# one file at a time) and presto's cold epoch (a fresh `prestod -d bench=MOUNT`, default
# workers and io.depth, pulled by `prestoctl epoch`; BENCH_FUSE_ROUNDS daemons, median).
# Case fuse-Nms is presto's cold epoch over the baseline's on the same mount (target 10x
# at 20 ms); fuse-20ms-vs-local is presto at 20 ms over presto's own cold epoch on the
# local directory (target 0.5). One more cold epoch per mount is pulled with --checksum
# and must equal the local directory's: every sample, label and byte.
#
# Where FUSE is unavailable (no slowfs, no /dev/fuse, mount refused) the cases are
# skipped with a message. The mounts are unmounted when the cases end, or fail.

BENCH_FUSE_SAMPLES=640
BENCH_FUSE_CLASSES=4
BENCH_FUSE_LATENCIES=(0 5 20)
BENCH_FUSE_ROUNDS=3
BENCH_FUSE_MOUNT=

fuse_unmount() {
    if [[ -n $BENCH_FUSE_MOUNT ]]; then
        fusermount3 -u "$BENCH_FUSE_MOUNT" 2>/dev/null || umount -l "$BENCH_FUSE_MOUNT" 2>/dev/null || true
        BENCH_FUSE_MOUNT=
    fi
}

# fuse_mount SRC MNT MS: mounts SRC on MNT with MS ms per open and read; 1 if refused.
fuse_mount() {
    local src=$1 mnt=$2 ms=$3
    mkdir -p "$mnt"
    if ! "$BUILD/slowfs" --latency-ms "$ms" "$src" "$mnt" 2>"$PRESTO_TMP/slowfs.err"; then
        echo "  slowfs could not mount: $(head -n 1 "$PRESTO_TMP/slowfs.err")"
        return 1
    fi
    BENCH_FUSE_MOUNT=$mnt
}

# fuse_cold DIR [ARGS...]: a fresh prestod serving DIR as `bench`, one cold epoch;
# leaves prestoctl's JSON line in BENCH_RESULT.
fuse_cold() {
    local dir=$1
    shift
    presto_start -d "bench=$dir"
    bench_epoch 0 "$@" # BENCH_DATASET is bench (bench.sh)
    presto_stop
}

# fuse_rounds DIR: BENCH_FUSE_ROUNDS cold epochs; JSON lines in BENCH_FUSE_RUNS.
fuse_rounds() {
    BENCH_FUSE_RUNS=()
    local r
    for ((r = 0; r < BENCH_FUSE_ROUNDS; r++)); do
        fuse_cold "$1"
        BENCH_FUSE_RUNS+=("$BENCH_RESULT")
    done
}

# fuse_checksum DIR: the --checksum of a cold epoch of DIR, into FUSE_SUM.
fuse_checksum() {
    fuse_cold "$1" --checksum >/dev/null
    FUSE_SUM=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["checksum"])' \
        "$BENCH_RESULT")
}

# fuse_with_reference REF_SAMPLES_PER_S REF_NAME RUN_JSON...: the runs, each carrying
# the reference to measure against; printed one per line.
fuse_with_reference() {
    local rate=$1 name=$2
    shift 2
    "$PYTHON" - "$rate" "$name" "$@" <<'EOF'
import json, sys
rate, name = float(sys.argv[1]), sys.argv[2]
for a in sys.argv[3:]:
    r = json.loads(a)
    r["reference"] = name
    r["reference_samples_per_s"] = rate
    print(json.dumps(r))
EOF
}

# fuse_median RUN_JSON...: the median samples_per_s.
fuse_median() {
    "$PYTHON" -c 'import json, statistics, sys
print(statistics.median(json.loads(a)["samples_per_s"] for a in sys.argv[1:]))' "$@"
}

bench_fuse_cases() {
    if [[ ! -x $BUILD/slowfs ]]; then
        echo "== fuse-*: skipped: $BUILD/slowfs is missing (libfuse3-dev: make deps)"
        return 0
    fi
    if [[ ! -r /dev/fuse || ! -w /dev/fuse ]]; then
        echo "== fuse-*: skipped: /dev/fuse is not available here"
        return 0
    fi
    local data=$BUILD/bench-fuse-data mnt=$PRESTO_TMP/fuse-mnt ms local_sum sum
    local base_file local_rate rate runs=() lines
    echo "== data set for slow storage: $BENCH_FUSE_SAMPLES JPEGs in $BENCH_FUSE_CLASSES" \
        "classes, made from real photos"
    "$PYTHON" tests/tools/mkdataset.py --out "$data" --count "$BENCH_FUSE_SAMPLES" \
        --classes "$BENCH_FUSE_CLASSES" --seed 3
    data=$(cd "$data" && pwd)
    trap 'fuse_unmount; presto_cleanup' EXIT

    echo "== presto cold epochs on the local directory ($BENCH_FUSE_ROUNDS daemons)"
    fuse_rounds "$data"
    local_rate=$(fuse_median "${BENCH_FUSE_RUNS[@]}")
    fuse_checksum "$data"
    local_sum=$FUSE_SUM
    echo "  median $local_rate samples/s; checksum $local_sum"

    for ms in "${BENCH_FUSE_LATENCIES[@]}"; do
        echo "== fuse-${ms}ms: slowfs, $ms ms per open and read"
        fuse_mount "$data" "$mnt" "$ms" || { echo "  fuse-*: skipped"; trap presto_cleanup EXIT; return 0; }
        base_file=$PRESTO_TMP/baseline-fuse-$ms.json
        echo "  baseline: torchvision ImageFolder + DataLoader on the mount ($(nproc) workers)"
        "$PYTHON" tests/bench/torch_baseline.py "$mnt" --transforms eval >"$base_file" \
            || presto_fail "the torchvision baseline failed on the ${ms} ms mount"
        rate=$("$PYTHON" -c 'import json, sys; b = json.load(open(sys.argv[1]))
for e in b["epochs"]:
    print("  baseline epoch: %.1f samples/s (%d samples, %.2f s)"
          % (e["samples_per_s"], e["samples"], e["seconds"]), file=sys.stderr)
print(b["samples_per_s"])' "$base_file")
        echo "  presto: cold epochs ($BENCH_FUSE_ROUNDS daemons)"
        fuse_rounds "$mnt"
        runs=("${BENCH_FUSE_RUNS[@]}")
        fuse_checksum "$mnt"
        sum=$FUSE_SUM
        [[ $sum == "$local_sum" ]] \
            || presto_fail "fuse-${ms}ms: checksum $sum differs from the local directory's $local_sum"
        echo "  checksum $sum: every sample as on the local directory"
        mapfile -t lines < <(fuse_with_reference "$rate" "torchvision on the ${ms} ms mount" \
            "${runs[@]}")
        bench_case "fuse-${ms}ms" "$([[ $ms == 20 ]] && echo 10 || echo 0)" "${lines[@]}"
        if [[ $ms == 20 ]]; then
            mapfile -t lines < <(fuse_with_reference "$local_rate" \
                "presto cold on the local directory" "${runs[@]}")
            bench_case fuse-20ms-vs-local 0.5 "${lines[@]}"
        fi
        fuse_unmount
    done
    trap presto_cleanup EXIT
}
