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
    printf 'cache:\n  dir: "%s"\ndatasets:\n  - name: folder\n    root: "%s"\n  - name: tar\n    root: "%s"\n' \
        "$PRESTO_TMP/cache" "$data" "$shards/train-{000000..$last}.tar" >"$conf"
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
    bench_s3_cases "$data"
}

# ---- the S3 cases (the ConcurrentDataloader setting) ----
#
# The bench data set uploaded to s3rver (tests/tools/objfixture.py, keys train/CLASS/NAME)
# behind its proxy, which delays every request by 0, 20 or 50 ms. Cold epochs of presto
# (prestod restarted before each: an empty cache; dataset s3://bench/train, default
# pipeline, io.depth 128) against, measured in the same run:
#   s3-0ms, s3-20ms, s3-50ms   (a) torchvision's DataLoader, 2 workers, each sample one
#                              boto3 GET (tests/bench/s3_baseline.py --mode plain);
#   s3-20ms-vs-threads         (b) the same with a thread pool of 16 fetching a batch's
#                              samples in each worker (--mode threads);
#   s3-20ms-vs-local           presto's own cold epoch of the local ImageFolder (page
#                              cache dropped first);
#   s3-warm-vs-local           warm epochs (from the memory tier) of the S3 dataset against
#                              the local one's, same daemon.
# The proxy runs with --no-check here: botocore's signature check is the tests' (test_s3),
# and on a 2-core machine its CPU would be taken from whichever side is decoding. And with
# --memo: s3rver's first answer to each whole-object GET (fetched before any epoch) is
# what the proxy answers that GET with, after its delay, for every client alike; s3rver
# (about 0.6 ms of node.js CPU a GET here) would otherwise take a third of the cores from
# whichever side decodes, which a deployment's object store does not.
# Targets (issue 16): at 20 ms 10x (a), 1.5x (b), 0.7x local; warm equal (0.9 allowing
# for noise); none at 0 and 50 ms (printed for the curve). Each presto epoch from s3 also
# prints the CPU it cost prestod, the proxy and s3rver (one node.js process), and the rate
# their sum allows on this machine's cores: the fixture runs on the cores prestod decodes
# on, which no deployment's object store does, so that rate, not the latency, is the
# ceiling wherever presto keeps enough GETs in flight. The local cold epoch prints
# prestod's CPU too, beside what the 20 ms S3 epoch cost it (the source's own overhead:
# HTTP, copies into the batch's buffers, wake-ups).
# Reproduce: BENCH_ONLY=sources make bench (the sources group also runs tar-local).
# BENCH_S3_DELAYS (default "0 20 50"): the delays measured (e.g. 20 alone);
# BENCH_S3_PERF=PREFIX: each presto epoch from s3 recorded by perf (call graphs) into
# PREFIX-DELAYms.data.

# s3_fixture_cmd LINE: sends a command to the fixture, reads its one-line answer.
s3_fixture_cmd() {
    local reply
    printf '%s\n' "$1" >&"${S3FX[1]}"
    IFS= read -r reply <&"${S3FX[0]}"
    [[ $reply != ERR* ]] || presto_fail "objfixture: $1: $reply"
}

# s3_baseline_run MODE: one epoch of s3_baseline.py; prints its summary, leaves the
# samples/s in S3_BASE_RATE.
s3_baseline_run() {
    local out
    out=$("$PYTHON" tests/bench/s3_baseline.py "$S3_ENDPOINT" bench train --mode "$1" \
        --workers 2 --threads 16 --access-key S3RVER --secret "$S3_SECRET") \
        || presto_fail "s3_baseline.py --mode $1 failed"
    S3_BASE_RATE=$("$PYTHON" -c 'import json, sys
print(json.loads(sys.argv[1])["epochs"][0]["samples_per_s"])' "$out")
    echo "  boto3 DataLoader ($1): $S3_BASE_RATE samples/s"
}

# s3_cpu PID...: the CPU seconds (user + system) each process has used so far.
s3_cpu() {
    local pid
    for pid in "$@"; do
        awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f ", ($14 + $15) / hz }' "/proc/$pid/stat" \
            2>/dev/null || printf '0 '
    done
}

# s3_cpu_say BEFORE AFTER: what one epoch cost prestod, the proxy and s3rver
# (the two fixture processes share the 2 cores with prestod: together they
# bound the epoch's rate, whatever the latency).
s3_cpu_say() {
    "$PYTHON" -c 'import sys
b = [float(x) for x in sys.argv[1].split()]; a = [float(x) for x in sys.argv[2].split()]
d = [y - x for x, y in zip(b, a)]
print("  CPU of that epoch: prestod %.2f s, proxy %.2f s, s3rver %.2f s: on %d cores at most"
      " %.0f samples/s" % (d[0], d[1], d[2], int(sys.argv[3]), int(sys.argv[4]) * int(sys.argv[3])
                          / max(sum(d), 1e-9)))' "$1" "$2" "$(nproc)" "$3"
}

# s3_with_ref RUN_JSON RATE NAME: the run with its reference attached.
s3_with_ref() {
    "$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1]); r["reference_samples_per_s"] = float(sys.argv[2])
r["reference"] = sys.argv[3]; print(json.dumps(r))' "$@"
}

bench_s3_cases() {
    local data=${1:-$BENCH_DATA} ready conf delay local_run s3_run
    S3_SECRET=presto-bench-secret
    if [[ ! -x build/s3rver/node_modules/.bin/s3rver ]]; then
        echo "== s3 cases: SKIP (s3rver is not installed under build/s3rver: make deps)"
        return 0
    fi
    echo "== s3: the bench data set in s3rver behind the SigV4-checking latency proxy"
    coproc S3FX { exec "$PYTHON" tests/tools/objfixture.py s3 --s3rver build/s3rver \
        --bucket "bench/train=$data" --access-key S3RVER --secret "$S3_SECRET" --no-check --memo; }
    if ! IFS= read -r ready <&"${S3FX[0]}" || [[ $ready != READY* ]]; then
        echo "== s3 cases: SKIP (the S3 fixture did not start)"
        return 0
    fi
    S3_ENDPOINT="http://127.0.0.1:$("$PYTHON" -c 'import json, sys
print(json.loads(sys.argv[1][6:])["port"])' "$ready")"
    export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=$S3_SECRET
    conf="$PRESTO_TMP/s3.yaml"
    printf 'source:\n  endpoint: %s\ndatasets:\n  - name: s3\n    root: s3://bench/train\n  - name: local\n    root: "%s"\n' \
        "$S3_ENDPOINT" "$data" >"$conf"
    for delay in ${BENCH_S3_DELAYS:-0 20 50}; do
        s3_fixture_cmd "delay $delay"
        echo "== s3-${delay}ms: cold epochs, every request delayed ${delay} ms"
        s3_baseline_run plain
        local base_plain=$S3_BASE_RATE
        presto_start -c "$conf"
        BENCH_DATASET=s3
        echo "  presto from s3:"
        local s3rver_pid cpu_before
        s3rver_pid=$(pgrep -P "$S3FX_PID" node | head -1)
        cpu_before=$(s3_cpu "$PRESTO_PID" "$S3FX_PID" "$s3rver_pid")
        local perf_pid=
        if [[ -n ${BENCH_S3_PERF:-} ]]; then
            perf record -q -g -F 499 -o "$BENCH_S3_PERF-${delay}ms.data" -p "$PRESTO_PID" &
            perf_pid=$!
            sleep 0.5
        fi
        bench_epoch 0
        if [[ -n $perf_pid ]]; then
            kill -INT "$perf_pid"
            wait "$perf_pid" || true
        fi
        s3_run=$BENCH_RESULT
        local cpu_after
        cpu_after=$(s3_cpu "$PRESTO_PID" "$S3FX_PID" "$s3rver_pid")
        S3_PRESTOD_CPU=$("$PYTHON" -c 'import sys; print(float(sys.argv[2].split()[0]) - float(sys.argv[1].split()[0]))' \
            "$cpu_before" "$cpu_after")
        s3_cpu_say "$cpu_before" "$cpu_after" \
            "$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["samples"])' "$s3_run")"
        if [[ $delay == 20 ]]; then
            echo "  presto warm, from s3 then local:"
            bench_warm_epochs
            local s3_warm=("${BENCH_WARM[@]}")
            BENCH_DATASET=local
            sources_drop_cache "$data"
            echo "  presto cold from the local folder:"
            local local_cpu
            local_cpu=$(s3_cpu "$PRESTO_PID")
            bench_epoch 0
            local_run=$BENCH_RESULT
            local_cpu="$local_cpu $(s3_cpu "$PRESTO_PID")"
            "$PYTHON" -c 'import sys
b, a = (float(x) for x in sys.argv[1].split()); s3 = float(sys.argv[2])
print("  CPU of that epoch: prestod %.2f s; the 20 ms S3 epoch cost prestod %.2f s (%+.0f%%)"
      % (a - b, s3, 100 * (s3 / max(a - b, 1e-9) - 1)))' "$local_cpu" "$S3_PRESTOD_CPU"
            bench_warm_epochs
            local local_warm=("${BENCH_WARM[@]}")
        fi
        presto_stop
        BENCH_DATASET=bench
        local target=0
        [[ $delay == 20 ]] && target=10
        bench_case "s3-${delay}ms" "$target" \
            "$(s3_with_ref "$s3_run" "$base_plain" "boto3-dataloader-2w-${delay}ms")"
        if [[ $delay == 20 ]]; then
            s3_baseline_run threads
            bench_case s3-20ms-vs-threads 1.5 \
                "$(s3_with_ref "$s3_run" "$S3_BASE_RATE" "boto3-dataloader-2w-16threads-20ms")"
            local local_rate
            local_rate=$("$PYTHON" -c 'import json, sys
print(json.loads(sys.argv[1])["samples_per_s"])' "$local_run")
            bench_case s3-20ms-vs-local 0.7 \
                "$(s3_with_ref "$s3_run" "$local_rate" "presto-local-cold")"
            local warm_ref runs=() line
            warm_ref=$("$PYTHON" -c 'import json, statistics, sys
print(statistics.median(json.loads(a)["samples_per_s"] for a in sys.argv[1:]))' \
                "${local_warm[@]}")
            for line in "${s3_warm[@]}"; do
                runs+=("$(s3_with_ref "$line" "$warm_ref" "presto-local-warm")")
            done
            bench_case s3-warm-vs-local 0.9 "${runs[@]}"
        fi
    done
    printf 'quit\n' >&"${S3FX[1]}"
    wait "$S3FX_PID" 2>/dev/null || true
    unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
}
