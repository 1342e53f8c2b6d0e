#!/usr/bin/env bash
# `make run`: makes a 2000-image demo data set, serves it with prestod (no config
# file), pulls a cold and a warm epoch with prestoctl and shows what the cache bought.
#
# Env: BUILD (default build), PYTHON (default /usr/bin/python3), PRESTO_PHOTOS.
#
# Sourced (by tests/bench/bench.sh) it only defines the presto_* helpers below, which
# run one prestod on a private socket and always clean it up:
#   presto_init                  temp dir, socket and log paths, cleanup trap
#   presto_start ARGS...         starts prestod -s SOCK ARGS..., waits until it serves
#   presto_ctl ARGS...           prestoctl -s SOCK ARGS...; on failure shows the log, exits
#   presto_stop                  SIGTERM, waits, fails unless it exited 0
#   presto_fail MESSAGE          prints MESSAGE and the daemon log tail, exits 1
set -euo pipefail

PRESTO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
PRESTO_START_TIMEOUT=${PRESTO_START_TIMEOUT:-30}
PRESTO_STOP_TIMEOUT=${PRESTO_STOP_TIMEOUT:-30}
PRESTO_TMP=
PRESTO_SOCK=
PRESTO_LOG=
PRESTO_PID=

presto_log_tail() {
    if [[ -s $PRESTO_LOG ]]; then
        echo "--- prestod log (last 30 lines) ---" >&2
        tail -n 30 "$PRESTO_LOG" >&2
        echo "---" >&2
    fi
}

presto_fail() {
    echo "error: $*" >&2
    presto_log_tail
    exit 1
}

presto_cleanup() {
    if [[ -n $PRESTO_PID ]] && kill -0 "$PRESTO_PID" 2>/dev/null; then
        kill -TERM "$PRESTO_PID" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$PRESTO_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$PRESTO_PID" 2>/dev/null || true
        wait "$PRESTO_PID" 2>/dev/null || true
    fi
    PRESTO_PID=
    if [[ -n $PRESTO_TMP ]]; then
        rm -rf "$PRESTO_TMP"
    fi
}

presto_init() {
    PRESTO_TMP=$(mktemp -d -t presto.XXXXXX)
    PRESTO_SOCK=$PRESTO_TMP/prestod.sock
    PRESTO_LOG=$PRESTO_TMP/prestod.log
    trap presto_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

presto_start() {
    local waited=0
    "$BUILD/prestod" -s "$PRESTO_SOCK" "$@" 2>"$PRESTO_LOG" &
    PRESTO_PID=$!
    until "$BUILD/prestoctl" -s "$PRESTO_SOCK" datasets >/dev/null 2>&1; do
        if ! kill -0 "$PRESTO_PID" 2>/dev/null; then
            local rc=0
            wait "$PRESTO_PID" || rc=$?
            PRESTO_PID=
            presto_fail "prestod exited with status $rc during start-up"
        fi
        if (( waited >= PRESTO_START_TIMEOUT * 10 )); then
            presto_fail "prestod did not accept connections within ${PRESTO_START_TIMEOUT} s"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

presto_ctl() {
    local out rc=0
    out=$("$BUILD/prestoctl" -s "$PRESTO_SOCK" "$@") || rc=$?
    if (( rc != 0 )); then
        if [[ -n $PRESTO_PID ]] && ! kill -0 "$PRESTO_PID" 2>/dev/null; then
            presto_fail "prestod died during 'prestoctl $*'"
        fi
        presto_fail "'prestoctl $*' exited with status $rc"
    fi
    printf '%s\n' "$out"
}

presto_stop() {
    local waited=0 rc=0
    kill -TERM "$PRESTO_PID" 2>/dev/null || true
    while kill -0 "$PRESTO_PID" 2>/dev/null; do
        if (( waited >= PRESTO_STOP_TIMEOUT * 10 )); then
            presto_fail "prestod did not exit within ${PRESTO_STOP_TIMEOUT} s of SIGTERM"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    wait "$PRESTO_PID" || rc=$?
    PRESTO_PID=
    if (( rc != 0 )); then
        presto_fail "prestod exited with status $rc after SIGTERM"
    fi
}

demo_show_datasets() {
    "$PYTHON" - "$1" <<'EOF'
import json, sys
for d in json.loads(sys.argv[1])["datasets"]:
    print("  %s: %d samples, %d classes, %s" % (d["name"], d["samples"], d["classes"], d["root"]))
    steps = d["steps"]
    print("  pipeline: %s | %s  (cached after step %d, output %s uint8)" % (
        " -> ".join(steps[:d["split"]]), " -> ".join(steps[d["split"]:]) or "-",
        d["split"], "x".join(str(n) for n in d["shape"])))
EOF
}

demo_show_stats() {
    "$PYTHON" - "$1" <<'EOF'
import json, sys
s = json.loads(sys.argv[1])
c = s["cache"]
print("  served    %d samples in %d batches (%.1f MiB), %d skipped"
      % (s["samples_served"], s["batches_served"], s["bytes_served"] / 2**20, s["samples_skipped"]))
print("  cache     %d entries, %.1f MiB of %.1f MiB, %d hits, %d misses, %d rejected"
      % (c["entries"], c["memory_bytes"] / 2**20, c["memory_budget"] / 2**20,
         c["hits"], c["misses"], c["rejected"]))
print("  steps     " + ", ".join("%s %.2f s/%d calls" % (k, v["seconds"], v["calls"])
                                 for k, v in s["steps"].items()))
e = s["errors"]
print("  errors    read %d, decode %d, too large %d; %d workers, up %.1f s"
      % (e["read"], e["decode"], e["too_large"], s["workers"], s["uptime_s"]))
EOF
}

demo_main() {
    cd "$PRESTO_ROOT"
    local data="$BUILD/demo-data"
    for prog in prestod prestoctl; do
        [[ -x $BUILD/$prog ]] || { echo "error: $BUILD/$prog is missing; run make" >&2; exit 1; }
    done

    echo "== demo data set: 2000 JPEGs in 10 classes, made from real photos"
    "$PYTHON" tests/tools/mkdataset.py --out "$data" --count 2000 --classes 10
    data=$(cd "$data" && pwd)

    presto_init
    echo "== starting prestod (no config file): -d demo=$data"
    presto_start -d "demo=$data"
    local datasets cold warm stats
    datasets=$(presto_ctl datasets)
    demo_show_datasets "$datasets"

    echo "== epoch 0: cache empty, every JPEG is read, decoded, resized and cropped"
    cold=$(presto_ctl epoch demo -e 0 --json)
    echo "== epoch 1: served from the cache, only the random flip runs"
    warm=$(presto_ctl epoch demo -e 1 --json)
    echo
    "$PYTHON" - "$cold" "$warm" <<'EOF'
import json, sys
cold, warm = (json.loads(a) for a in sys.argv[1:3])
for name, e in (("cold", cold), ("warm", warm)):
    print("  %s epoch: %d samples in %d batches, %.2f s, %d skipped"
          % (name, e["samples"], e["batches"], e["seconds"], e["skipped"]))
print()
print("cold epoch: %.0f samples/s" % cold["samples_per_s"])
print("warm epoch: %.0f samples/s (%.1fx the cold one)"
      % (warm["samples_per_s"], warm["samples_per_s"] / max(cold["samples_per_s"], 1e-9)))
EOF
    echo
    echo "== prestoctl stats"
    stats=$(presto_ctl stats)
    demo_show_stats "$stats"

    presto_stop
    echo "== prestod stopped cleanly"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    demo_main "$@"
fi
