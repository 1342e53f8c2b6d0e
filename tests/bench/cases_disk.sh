# shellcheck shell=bash
# `make bench` cases for the disk tier, sourced by bench.sh (which provides BUILD,
# PYTHON, PRESTO_TMP, BENCH_DATA, bench_case and demo.sh's presto_* helpers):
#
#   bench_disk_cases [DATA_DIR]      (default: $BENCH_DATA)
#
# Cases disk-raw, disk-zstd and disk-raw-direct (raw records read with cache.direct_io:
# O_DIRECT, whole aligned blocks, against ioread --direct): prestod serves DATA_DIR as `bench`
# with a disk tier in a fresh directory and a memory budget far below the dataset
# (1 MiB), and `prestoctl warm` materializes it into the disk tier. Then, rounds of
# BENCH_DISK_EPOCHS (6) epochs each: the segment files are written back and dropped from
# the page cache and one epoch is pulled (every sample read from the disk tier, a batch's
# records through io_uring on its worker, checked, decompressed (zstd), flipped and
# sent); then at once $BUILD/ioread reads the same records (the same files, each record
# in one read as the daemon does, queue depth io.depth, one thread per worker, batches of
# the epoch's batch size) from a dropped page cache: the raw random-read bandwidth of
# that disk for those reads, measured in the same run. A round's rate is its epochs'
# bytes over their summed seconds, the raw read's likewise (an epoch on a fast disk is
# 0.2 s, too short for one to be a stable figure on a shared machine). Each round is one
# run of the case (BENCH_DISK_ROUNDS, 7): the case's ratio is the median of the rounds'
# own ratios (presto's rate over the raw read's in the same round, each epoch back to
# back with its raw read on the same records from a dropped page cache), printed with
# their spread, so the device's drift between rounds (the raw read alone moves by 20% on
# a loop device) moves both sides of a ratio, not the figure; a round's JSON also lists
# its epochs' own ratios (epoch_ratios).
# The epochs are pulled as a training loop pulls them, on one connection ($BUILD/epochs,
# tests/bench/epochs.c), whose first epoch (not counted) makes the shared-memory ring its
# later streams reuse; NAME-new-process stands beside each case: the same rounds, each
# pulled by a new `prestoctl epoch` process and so into a new ring, whose pages prestod
# faults in and zeroes during the epoch (no target: a trainer pays that once; one epoch
# a round).
#
# A case's ratio is presto's disk-tier read rate (record bytes read / epoch seconds)
# over that raw rate; the target (issue 13) is 0.85 through the page cache and 0.9 with
# O_DIRECT (disk-raw-direct). That read does less than prestod must with
# each record (no checksum, no copy into a batch), so beside each raw case stands
# NAME-same-work: the same epochs against ioread --check, which also checks each
# record's checksums and copies its payload into a batch (for a raw record the work
# prestod does, the flip writing it there instead of the copy; there is no such case
# for zstd, whose decompression the checked read does not do). Next to it the daemon's
# CPU use (cores) and how busy the machine's cores were during the epoch are printed,
# so a case that misses while CPU-bound says so.
#
# BENCH_DISK_IOREAD_ARGS (optional): more arguments for every ioread run (e.g. --huge:
# its buffers on huge pages, as prestod's arenas are).
#
# BENCH_PERF=DIR (optional, needs Debian's linux-perf): each round's epoch is recorded with
# `perf record -g` on prestod into DIR/NAME-EPOCH.data (`perf report --no-children -i FILE`
# shows where prestod's cycles went); the recording costs some of the figures' speed.
# BENCH_PERF_ARGS replaces -g (e.g. "--call-graph dwarf" where prestod has no frame
# pointers).

BENCH_DISK_BATCH=64
BENCH_DISK_ROUNDS=${BENCH_DISK_ROUNDS:-7} # rounds per case (the median is reported)
BENCH_DISK_EPOCHS=${BENCH_DISK_EPOCHS:-6} # epochs per round (its rate: their sums)

# disk_drop_cache FILE...: writes the files back and drops them from the page cache.
disk_drop_cache() {
    "$PYTHON" - "$@" <<'EOF'
import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
EOF
}

# disk_cpu_sample PID: "daemon_ticks busy_ticks total_ticks" (prestod's utime + stime,
# and the machine's busy and total jiffies from /proc/stat).
disk_cpu_sample() {
    local pid=$1 stat f
    stat=$(<"/proc/$pid/stat")
    stat=${stat##*) }
    # Fields after the command: state is 1, utime 12, stime 13.
    read -r -a f <<<"$stat"
    local daemon=$((f[11] + f[12]))
    read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
    local busy=$((user + nice + system + irq + softirq + steal))
    echo "$daemon $busy $((busy + idle + iowait))"
}

# disk_epochs_start: starts $BUILD/epochs on one connection to the running prestod, fed
# through two FIFOs whose ends DISK_EPOCHS_TO and DISK_EPOCHS_FROM name (inherited by
# disk_round's subshell, which a coproc's are not); disk_round then pulls its epochs there.
disk_epochs_start() {
    local fifo=$PRESTO_TMP/epochs
    rm -f "$fifo.in" "$fifo.out"
    mkfifo "$fifo.in" "$fifo.out"
    "$BUILD/epochs" "$PRESTO_SOCK" bench "$BENCH_DISK_BATCH" <"$fifo.in" >"$fifo.out" &
    DISK_EPOCHS_PID=$!
    exec {DISK_EPOCHS_TO}>"$fifo.in" {DISK_EPOCHS_FROM}<"$fifo.out"
}

# disk_epochs_stop: ends $BUILD/epochs (end of its input) and closes the FIFOs.
disk_epochs_stop() {
    exec {DISK_EPOCHS_TO}>&- {DISK_EPOCHS_FROM}<&-
    wait "$DISK_EPOCHS_PID" || presto_fail "$BUILD/epochs exited with an error"
    DISK_EPOCHS_TO='' DISK_EPOCHS_FROM='' DISK_EPOCHS_PID=''
    rm -f "$PRESTO_TMP/epochs.in" "$PRESTO_TMP/epochs.out"
}

# disk_round NAME DIR ROUND [CHECKED]: round ROUND of a case on the running prestod:
# BENCH_DISK_EPOCHS epochs (numbered from (ROUND - 1) * BENCH_DISK_EPOCHS + 1), each
# pulled from the dropped disk tier and followed at once by the raw read of the same
# records from a dropped page cache; prints the round's JSON line, its rate and the raw
# read's each the summed bytes over the summed seconds of its epochs (and the figures on
# stderr). With CHECKED (1), each epoch's records are also read with ioread --check
# (checksums checked, payloads copied into a batch: the same work for a raw record as
# prestod's) and a second line gives the round against that read.
disk_round() {
    local name=$1 dir=$2 round=$3 checked=${4:-0}
    local stats0 stats1 run raw cpu0 cpu1 workers depth backend direct j e c
    local segs=("$dir"/cache/seg-*.dat) pread_flag=() direct_flag=()
    local runs=() raws=() checks=() ticks=(0 0 0) c0 c1
    stats0=$(presto_ctl stats)
    read -r workers depth backend direct < <("$PYTHON" -c 'import json, sys
s = json.loads(sys.argv[1])
print(s["workers"], s["io"]["depth"], s["io"]["backend"], s["disk"]["direct_io"])' "$stats0")
    [[ $backend == pread ]] && pread_flag=(--pread)
    [[ $direct == 1 ]] && direct_flag=(--direct)
    local ioread=("$BUILD/ioread" --drop --threads "$workers" --depth "$depth"
        --batch "$BENCH_DISK_BATCH" "${pread_flag[@]}" "${direct_flag[@]}")
    local extra
    read -r -a extra <<<"${BENCH_DISK_IOREAD_ARGS:-}"
    ioread+=("${extra[@]}")
    local perf_pid=
    if [[ -n ${BENCH_PERF:-} ]]; then # the round's epochs (prestod idles in the reads)
        mkdir -p "$BENCH_PERF"
        local perf_args
        read -r -a perf_args <<<"${BENCH_PERF_ARGS:--g}"
        perf record -q "${perf_args[@]}" -p "$PRESTO_PID" \
            -o "$BENCH_PERF/$name-$round.data" 2>/dev/null &
        perf_pid=$!
        sleep 0.5 # perf attached
    fi
    for ((j = 1; j <= BENCH_DISK_EPOCHS; j++)); do
        e=$(((round - 1) * BENCH_DISK_EPOCHS + j))
        disk_drop_cache "${segs[@]}"
        cpu0=$(disk_cpu_sample "$PRESTO_PID")
        if [[ -n ${DISK_EPOCHS_TO:-} ]]; then # the kept connection (disk_epochs_start)
            echo "$e" >&"$DISK_EPOCHS_TO"
            read -r run <&"$DISK_EPOCHS_FROM" || presto_fail "$name: $BUILD/epochs stopped"
        else
            run=$(presto_ctl epoch bench -e "$e" -b "$BENCH_DISK_BATCH" --json)
        fi
        cpu1=$(disk_cpu_sample "$PRESTO_PID")
        read -r -a c0 <<<"$cpu0"
        read -r -a c1 <<<"$cpu1"
        for ((c = 0; c < 3; c++)); do ticks[c]=$((ticks[c] + c1[c] - c0[c])); done
        runs+=("$run")
        raw=$("${ioread[@]}" --seed "$e" "${segs[@]}") || presto_fail "ioread failed on $dir/cache"
        raws+=("$raw")
        if [[ $checked == 1 ]]; then
            raw=$("${ioread[@]}" --check --seed "$e" "${segs[@]}") \
                || presto_fail "ioread --check failed on $dir/cache"
            checks+=("$raw")
        fi
    done
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
    fi
    stats1=$(presto_ctl stats)
    local IFS=,
    "$PYTHON" - "$name" "[${runs[*]}]" "$stats0" "$stats1" "[${raws[*]}]" "${ticks[*]}" \
        "$(getconf CLK_TCK)" "[${checks[*]}]" "$round" <<'EOF'
import json, sys
name, epochs, s0, s1, raws = sys.argv[1], *(json.loads(a) for a in sys.argv[2:6])
ticks = [int(x) for x in sys.argv[6].split(",")]
hz = int(sys.argv[7])
checks = json.loads(sys.argv[8])
rnd = int(sys.argv[9])


def rate(reads):
    """ioread's summed bytes over its summed seconds, in MB/s."""
    secs = sum(r["seconds"] for r in reads)
    return sum(r["bytes"] for r in reads) / 1e6 / secs if secs > 0 else 0.0


read = s1["disk"]["bytes_read"] - s0["disk"]["bytes_read"]
hits = s1["disk"]["hits"] - s0["disk"]["hits"]
secs = sum(e["seconds"] for e in epochs)
samples = sum(e["samples"] for e in epochs)
mbs = read / 1e6 / secs if secs > 0 else 0.0
per_sample = read / hits if hits else 0.0
raw_mbs = round(rate(raws), 1)
daemon_cores = ticks[0] / hz / secs if secs > 0 else 0.0
busy = ticks[1] / max(ticks[2], 1)
out_mbs = (s1["bytes_served"] - s0["bytes_served"]) / 1e6 / secs if secs > 0 else 0.0
# each epoch against the raw read right after it: the spread inside the round
each = [e["samples"] * per_sample * r["seconds"] / (e["seconds"] * r["bytes"])
        if e["seconds"] > 0 and r["bytes"] > 0 else 0.0 for e, r in zip(epochs, raws)]
run = dict(epochs[0])
run.update({
    "epoch": rnd,
    "epochs": [e["epoch"] for e in epochs],
    "samples": samples,
    "batches": sum(e["batches"] for e in epochs),
    "skipped": sum(e["skipped"] for e in epochs),
    "seconds": round(secs, 6),
    "samples_per_s": round(samples / secs, 1) if secs > 0 else 0.0,
    "first_batch_s": max(e["first_batch_s"] for e in epochs),
    "epoch_ratios": [round(x, 3) for x in each],
    "paired": True,  # the ratio: the median of the rounds' own (report.py)
    "reference": "raw-read",
    "reference_detail": "raw random read of the same records right after each epoch "
                        "(ioread: depth %d, %d threads, batches of %d, %s%s%s)"
                        % (raws[0]["depth"], raws[0]["threads"], raws[0]["batch"],
                           raws[0]["backend"], ", O_DIRECT" if raws[0].get("direct") else "",
                           ", huge pages" if raws[0].get("huge") else ""),
    "reference_samples_per_s": raw_mbs * 1e6 / per_sample if per_sample else 0.0,
    "disk_mb_per_s": round(mbs, 1),
    "raw_mb_per_s": raw_mbs,
    "served_mb_per_s": round(out_mbs, 1),
    "disk_hits": hits,
    "compression_ratio": s1["disk"]["compression_ratio"],
    "daemon_cores": round(daemon_cores, 2),
    "machine_busy": round(busy, 3),
})
ra0, ra1 = s0["io"].get("readahead", {}), s1["io"].get("readahead", {})
ahead = {k: ra1.get(k, 0) - ra0.get(k, 0) for k in ("batches", "over_budget", "buffered_disk")}
run["read_ahead"] = dict(ahead, max_in_flight=ra1.get("max_in_flight", 0))
print("  %s round %d (%d epochs, each %.2f-%.2fx): %d samples from disk in %.2f s: %.1f MB/s "
      "read (%.1f MB/s served), raw random read %.1f MB/s: %.2fx; the first batch after "
      "%.3f s at most; prestod used %.2f cores, the machine's cores were %.0f%% busy; %d "
      "batches read ahead, %d over its budget, %d left to the workers (buffered disk "
      "records), %d reads in flight at most"
      % (name, rnd, len(epochs), min(each), max(each), hits, secs, mbs, out_mbs, raw_mbs,
         mbs / raw_mbs if raw_mbs else 0.0, run["first_batch_s"], daemon_cores, busy * 100,
         ahead["batches"], ahead["over_budget"], ahead["buffered_disk"],
         run["read_ahead"]["max_in_flight"]),
      file=sys.stderr)
print(json.dumps(run))
if checks:
    c_mbs = round(rate(checks), 1)
    same = dict(run)
    del same["epoch_ratios"]  # against the raw read
    same.update({
        "reference": "checked-read",
        "reference_detail": "the same reads with each record's checksums checked and its "
                            "payload copied into a batch (ioread --check)",
        "reference_samples_per_s": c_mbs * 1e6 / per_sample if per_sample else 0.0,
        "raw_mb_per_s": c_mbs,
    })
    print("  %s round %d against the checked read of the same records (%.1f MB/s): %.2fx"
          % (name, rnd, c_mbs, mbs / c_mbs if c_mbs else 0.0), file=sys.stderr)
    print(json.dumps(same))
EOF
}

# disk_case NAME ENCODING DATA_DIR [DIRECT_IO]: the case NAME against the bare read
# (raw records: target 0.85, 0.9 with O_DIRECT; a compressed encoding has none: its
# records are decompressed too, on the same cores, which the bare read does not) and,
# for raw records, NAME-same-work against the checked read.
disk_case() {
    local name=$1 encoding=$2 data=$3 direct=${4:-false} target=0.85
    local dir=$PRESTO_TMP/$name conf=$PRESTO_TMP/$name.yaml warm run runs=() same=() e
    local checked=0 lines fresh=()
    [[ $encoding == raw ]] && checked=1
    [[ $direct == true ]] && target=0.9
    [[ $encoding == raw ]] || target=0
    mkdir -p "$dir"
    cat >"$conf" <<EOF
cache:
  memory: 1MiB
  dir: $dir/cache
  disk: 64GiB
  direct_io: $direct
datasets:
  - name: bench
    root: $data
    encoding: $encoding
EOF
    echo "== $name: disk tier ($encoding, direct_io $direct) only, memory budget 1 MiB"
    presto_start -c "$conf"
    warm=$(presto_ctl warm bench --json)
    echo "  warm: $warm"
    # The epochs as a trainer pulls them: one connection for all; its first epoch (not
    # counted) makes the ring that its later streams reuse. It is a round 0 of one epoch
    # and its raw read, not counted either: the first raw read after the warm-up ran up to
    # 30% slow (the files just written back), which made round 1 an outlier.
    disk_epochs_start
    BENCH_DISK_EPOCHS=1 disk_round "$name" "$dir" 0 >/dev/null \
        || presto_fail "$name: round 0 failed"
    for ((e = 1; e <= BENCH_DISK_ROUNDS; e++)); do
        lines=$(disk_round "$name" "$dir" "$e" "$checked") \
            || presto_fail "$name: round $e failed"
        { read -r run; runs+=("$run"); [[ $checked == 0 ]] || { read -r run; same+=("$run"); }; } \
            <<<"$lines"
    done
    disk_epochs_stop
    # The same rounds with a new process (prestoctl epoch) each, which also makes a new
    # ring each time (its first touch: page faults and zeroing in prestod).
    for ((e = 1; e <= BENCH_DISK_ROUNDS; e++)); do
        run=$(BENCH_DISK_EPOCHS=1 disk_round "$name-new-process" "$dir" "$e") \
            || presto_fail "$name-new-process: round $e failed"
        fresh+=("$run")
    done
    presto_stop
    bench_case "$name" "$target" "${runs[@]}"
    if [[ $checked == 1 ]]; then
        bench_case "$name-same-work" 0 "${same[@]}"
    fi
    bench_case "$name-new-process" 0 "${fresh[@]}"
}

# bench_disk_cases [DATA_DIR]: both cases.
bench_disk_cases() {
    local data=${1:-$BENCH_DATA}
    if [[ ! -x $BUILD/ioread || ! -x $BUILD/epochs ]]; then
        echo "== disk-raw, disk-zstd: skipped: $BUILD/ioread or $BUILD/epochs is missing" \
            "(make bench builds them)"
        return 0
    fi
    disk_case disk-raw raw "$data"
    disk_case disk-zstd zstd "$data"
    disk_case disk-raw-direct raw "$data" true
    echo "== disk cases measured on $(df --output=source,fstype "$PRESTO_TMP" | tail -1)" \
        "($PRESTO_TMP); reproduce: TMPDIR=${TMPDIR:-/tmp} BENCH_ONLY=disk make bench"
}
