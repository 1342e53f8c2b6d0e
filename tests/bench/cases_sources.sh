# shellcheck shell=bash
# `make bench` cases for sources (issue 16), sourced by bench.sh (which provides BUILD,
# PYTHON, PRESTO_TMP, BENCH_DATA, bench_case, bench_epoch and demo.sh's presto_* helpers):
#
#   bench_sources_cases [DATA_DIR]      (default: $BENCH_DATA)
#
# Case tar-local: a cold epoch from WebDataset tar shards of the bench data set
# (tests/tools/mkshards.py, 256 samples a shard, in ImageFolder's order) against a cold
# epoch of the same files as the ImageFolder, measured in the same run by the same
# prestod (default pipeline: decode, resize 256, center_crop 224, random_flip; each
# dataset its own cache, empty at the start of a round). Before each epoch the source
# files (the tree, or the shards) are written back and dropped from the page cache, so
# both read from the disk. Each round restarts the daemon; the order of the two epochs
# alternates between rounds; the ratio is the tar epochs' median rate over the folder
# epochs' median rate (target 0.9).
#
# Reproduce: make bench (the case prints its figures); or by hand, with prestod -c on a
# config serving both roots: prestoctl epoch folder -e 0 --json; prestoctl epoch tar -e 0
# --json (after dropping the files from the page cache).

BENCH_SOURCES_ROUNDS=3

# sources_drop_cache DIR_OR_FILE...: every regular file below them written back and
# dropped from the page cache.
sources_drop_cache() {
    "$PYTHON" - "$@" <<'EOF'
import os, sys
def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
for top in sys.argv[1:]:
    if os.path.isdir(top):
        for d, _, files in os.walk(top):
            for f in files:
                drop(os.path.join(d, f))
    else:
        drop(top)
EOF
}

bench_sources_cases() {
    local data=${1:-$BENCH_DATA} shards="$PRESTO_TMP/shards" n conf line
    echo "== tar-local: the bench data set as tar shards against the ImageFolder, cold epochs"
    n=$("$PYTHON" tests/tools/mkshards.py "$data" "$shards/train-%06d.tar" --per-shard 256)
    local last
    last=$(printf '%06d' $((n - 1)))
    conf="$PRESTO_TMP/sources.yaml"
    printf 'datasets:\n  - name: folder\n    root: "%s"\n  - name: tar\n    root: "%s"\n' \
        "$data" "$shards/train-{000000..$last}.tar" >"$conf"
    local folder_runs=() tar_runs=() round first second
    for round in $(seq 1 "$BENCH_SOURCES_ROUNDS"); do
        presto_start -c "$conf"
        if ((round % 2)); then first=folder second=tar; else first=tar second=folder; fi
        for BENCH_DATASET in $first $second; do
            if [[ $BENCH_DATASET == tar ]]; then sources_drop_cache "$shards"; else
                sources_drop_cache "$data"; fi
            echo "  round $round, $BENCH_DATASET:"
            bench_epoch 0
            if [[ $BENCH_DATASET == tar ]]; then tar_runs+=("$BENCH_RESULT"); else
                folder_runs+=("$BENCH_RESULT"); fi
        done
        presto_stop
    done
    BENCH_DATASET=bench
    # Each tar run carries the folder's median rate as its reference.
    local ref
    ref=$("$PYTHON" -c 'import json, statistics, sys
print(statistics.median(json.loads(a)["samples_per_s"] for a in sys.argv[1:]))' \
        "${folder_runs[@]}")
    local runs=()
    for line in "${tar_runs[@]}"; do
        runs+=("$("$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1]); r["reference_samples_per_s"] = float(sys.argv[2])
r["reference"] = "imagefolder-cold"; print(json.dumps(r))' "$line" "$ref")")
    done
    echo "  ImageFolder cold epochs: median $ref samples/s"
    bench_case tar-local 0.9 "${runs[@]}"
}
