#!/usr/bin/env bash
# `make bench`: presto against torchvision's ImageFolder + DataLoader on 3200 JPEGs
# made from real photos. Writes $BUILD/bench.json and prints a table.
#
# Env: BUILD (default build), PYTHON (default /usr/bin/python3), PRESTO_PHOTOS;
# BENCH_ONLY: a comma-separated list of the groups of cases to run (default, split,
# train, disk, fuse, cluster, sources, profile, audio; unset: all of them, the full `make bench`); the torchvision
# baselines run only for the groups measured against them (default, split, train), e.g.
# `BENCH_ONLY=disk make bench` while working on the disk tier.
#
# Two torchvision baselines, measured in this run:
#   eval   Resize(256), CenterCrop(224), RandomHorizontalFlip, PILToTensor (uint8)
#   train  RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize (float32)
# and presto's cases, each the same work as its baseline:
#   cold-c, warm-c        the default pipeline (prestod -d), first epoch / from the cache
#                         (prestoctl: C client, shared memory, as by default)
#   warm-python-shm, warm-python-socket  warm-c's epochs consumed from Python as torch
#                         tensors (presto.torch.Loader, one process pulling the epochs one
#                         after the other as a training loop does) through shared memory /
#                         the socket
#   warm-python-shm-bw    warm-python-shm's image bytes/s against numpy's memcpy bandwidth
#                         measured in the same run (ratio = fraction of it)
#   warm-split-decode     eval's transforms, cached after decode (resize, crop, flip online)
#   warm-split-resize     ... cached after resize (crop, flip online)
#   warm-split-crop       ... cached after center_crop (flip online)
#   cold-train-resize256, warm-train-resize256  resize 256 cached; random_resized_crop
#                         224, flip and normalize (float32 NCHW) online: a different
#                         augmentation (crops of a 256-pixel image) from the baseline's
#   (train group) tests/bench/cases_recipes.sh: warm-train and cold-train, the identical
#                         pipeline (crops of the full-resolution image), train-recipe
#                         against the reference recipe's baseline, roi-decode
#   resume                time to the first batch of an epoch resumed at its middle
#                         (prestoctl epoch --start-batch, a fresh prestod: cold cache)
#                         against the same at batch 0, in the same run (ratio = time at 0
#                         over time at the middle; a resume that computed the skipped
#                         half first would take about half an epoch longer)
# Each pipeline runs in its own prestod (default workers, default cache budget), so a
# cold epoch finds the cache empty and warm epochs see only their own data set.
#
# Adding a case: pull epochs with bench_epoch (or anything printing prestoctl epoch's
# JSON line) and pass the result lines to bench_case NAME TARGET_RATIO RUN_JSON... (ratio
# to the eval baseline) or bench_case_vs BASELINE NAME TARGET_RATIO RUN_JSON...; the
# case's figure is the median of its runs (runs carrying reference_samples_per_s are
# measured against that instead). tests/bench/cases_disk.sh, when present, may define
# bench_disk_cases, called last with the data set's directory and no prestod running;
# tests/bench/cases_fuse.sh likewise bench_fuse_cases (slow storage: FUSE mounts),
# tests/bench/cases_cluster.sh bench_cluster_cases (the cluster tier: several nodes),
# tests/bench/cases_sources.sh bench_sources_cases (tar shards against the folder), and
# tests/bench/cases_profile.sh bench_profile_cases (the profiler's table of strategies and
# the `auto` case: the auto choice over everything online).
# tests/bench/cases_audio.sh bench_audio_cases (audio-cold, audio-warm, audio-auto against
# torchaudio in a DataLoader: spoken words from mkaudio.py).
# Exits non-zero only when something crashed; a missed target is printed as MISS.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../tools/demo.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tools/demo.sh"
cd "$PRESTO_ROOT"

BENCH_SAMPLES=3200
BENCH_CLASSES=10
BENCH_WARM_EPOCHS=(1 2 3)
# The Python cases pull more epochs in one process: a client keeps each finished
# epoch's ring for the next (double-buffered while the last batch's tensors live), so
# from the third epoch on a training loop runs on kept rings; the median covers both.
BENCH_PY_EPOCHS=(1 2 3 4 5)
BENCH_DATASET=bench # what bench_epoch pulls
MEAN="[0.485, 0.456, 0.406]"
STD="[0.229, 0.224, 0.225]"

bench_case() {
    "$PYTHON" tests/bench/report.py case "$BENCH_CASES" "$@"
}

# bench_case_vs BASELINE NAME TARGET RUN_JSON...: a case measured against another
# baseline (train).
bench_case_vs() {
    local baseline=$1
    shift
    "$PYTHON" tests/bench/report.py case --baseline "$baseline" "$BENCH_CASES" "$@"
}

# bench_epoch EPOCH [ARGS...]: pulls one epoch of $BENCH_DATASET, prints a summary
# line and leaves prestoctl's JSON line in BENCH_RESULT.
bench_epoch() {
    local epoch=$1
    shift
    BENCH_RESULT=$(presto_ctl epoch "$BENCH_DATASET" -e "$epoch" --json "$@")
    "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); print(
        "  epoch %d: %.1f samples/s (%d samples, %.2f s, %d skipped)"
        % (r["epoch"], r["samples_per_s"], r["samples"], r["seconds"], r["skipped"]))' \
        "$BENCH_RESULT"
}

# bench_warm_epochs: pulls BENCH_WARM_EPOCHS, leaving the JSON lines in BENCH_WARM.
# One prestoctl pulls them one after the other, as a training loop does (from the
# second on, a stream runs on the ring its connection kept: see proto.h).
bench_warm_epochs() {
    local line
    BENCH_WARM=()
    while IFS= read -r line; do
        "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); print(
            "  epoch %d: %.1f samples/s (%d samples, %.2f s, %d skipped)"
            % (r["epoch"], r["samples_per_s"], r["samples"], r["seconds"], r["skipped"]))' \
            "$line"
        BENCH_WARM+=("$line")
    done < <(presto_ctl epoch "$BENCH_DATASET" -e "${BENCH_WARM_EPOCHS[0]}" \
        -n "${#BENCH_WARM_EPOCHS[@]}" --json)
    [[ ${#BENCH_WARM[@]} -eq ${#BENCH_WARM_EPOCHS[@]} ]] \
        || presto_fail "$BENCH_DATASET: warm epochs missing"
}

# bench_config NAME SPLIT STEPS...: writes a config serving the bench data set as
# NAME with those steps (YAML flow items) and split; prints its path.
bench_config() {
    local name=$1 split=$2 file="$PRESTO_TMP/$1.yaml"
    shift 2
    local IFS=,
    printf 'datasets:\n  - name: %s\n    root: "%s"\n    steps: [%s]\n    split: %s\n' \
        "$name" "$BENCH_DATA" "$*" "$split" >"$file"
    printf '%s\n' "$file"
}

bench_baseline() {
    local name=$1 file="$PRESTO_TMP/baseline-$1.json"
    shift
    "$PYTHON" tests/bench/torch_baseline.py "$BENCH_DATA" "$@" >"$file" \
        || presto_fail "the torchvision $name baseline failed"
    "$PYTHON" - "$file" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))
for i, e in enumerate(b["epochs"]):
    print("  epoch %d: %.1f samples/s (%d samples, %.2f s)"
          % (i, e["samples_per_s"], e["samples"], e["seconds"]))
EOF
}

# The default pipeline, as `prestod -d` serves it: cold-c, warm-c.
bench_default_cases() {
    echo "== presto: prestod -d bench=$BENCH_DATA (default workers)"
    BENCH_DATASET=bench
    presto_start -d "bench=$BENCH_DATA"
    echo "== cold-c: epoch 0, cache empty"
    bench_epoch 0
    bench_case cold-c 2 "$BENCH_RESULT"
    echo "== warm-c: epochs ${BENCH_WARM_EPOCHS[*]} from the cache (median reported)"
    bench_warm_epochs
    bench_case warm-c 20 "${BENCH_WARM[@]}"
    bench_python_cases
    presto_ctl stats >"$PRESTO_TMP/stats.json"
    presto_stop
}

# Warm epochs of the running `bench` dataset pulled from Python: warm-python-shm,
# warm-python-socket, and warm-python-shm-bw against the memcpy bandwidth.
bench_python_cases() {
    local transport e run memcpy bw runs
    local py=(env PYTHONPATH="$PRESTO_ROOT/client/python" PRESTO_LIB="$BUILD/libprestoclient.so.0"
        "$PYTHON" tests/bench/py_epoch.py)
    memcpy=$("${py[@]}" memcpy)
    bw=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["bytes_per_s"])' "$memcpy")
    echo "== memcpy bandwidth (numpy, one thread, 256 MiB): $("$PYTHON" -c \
        'import sys; print("%.2f GB/s" % (float(sys.argv[1]) / 1e9))' "$bw")"
    for transport in shm socket; do
        echo "== warm-python-$transport: epochs ${BENCH_PY_EPOCHS[*]} as torch tensors" \
            "(presto.torch.Loader, transport $transport)"
        runs=()
        # One process, epoch after epoch, as a training loop pulls them.
        while IFS= read -r run; do
            "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); print(
                "  epoch %d: %.1f samples/s, %.2f GB/s of images" % (
                r["epoch"], r["samples_per_s"], r["bytes_per_s"] / 1e9))' "$run"
            runs+=("$run")
        done < <("${py[@]}" epoch "$PRESTO_SOCK" "$BENCH_DATASET" "$transport" \
            "${BENCH_PY_EPOCHS[@]}")
        [[ ${#runs[@]} -eq ${#BENCH_PY_EPOCHS[@]} ]] \
            || presto_fail "warm-python-$transport: the Python client failed"
        bench_case "warm-python-$transport" "$([[ $transport == shm ]] && echo 50 || echo 0)" \
            "${runs[@]}"
        if [[ $transport == shm ]]; then
            # The same runs against memcpy: reference samples/s = bandwidth / sample bytes.
            local bw_runs=()
            for run in "${runs[@]}"; do
                bw_runs+=("$("$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1]); bw = float(sys.argv[2])
sample = r["bytes_per_s"] / r["samples_per_s"]
r["reference"] = "memcpy"; r["reference_samples_per_s"] = bw / sample
print(json.dumps(r))' "$run" "$bw")")
            done
            bench_case warm-python-shm-bw 0.6 "${bw_runs[@]}"
        fi
    done
}

# The eval transforms split after decode, resize and center_crop.
bench_split_cases() {
    local split target config
    for split in decode resize center_crop; do
        target=0
        [[ $split == center_crop ]] && target=20
        config=$(bench_config "split-$split" "$split" decode "{resize: 256}" \
            "{center_crop: 224}" "{random_flip: 0.5}")
        echo "== warm-split-${split#center_}: Resize(256)+CenterCrop(224)+flip, cached after $split"
        BENCH_DATASET=split-$split
        presto_start -c "$config"
        echo "  (epoch 0 fills the cache)"
        bench_epoch 0
        bench_warm_epochs
        bench_case "warm-split-${split#center_}" "$target" "${BENCH_WARM[@]}"
        presto_stop
    done
}

# Time to the first batch of epoch 0 resumed at its middle against at batch 0, each on a
# fresh prestod (an empty cache, as after a preemption), alternating, BENCH_RESUME_RUNS
# each. A run's samples_per_s is the first batch's samples over that time, so the ratio
# is the time at batch 0 over the time at the middle.
BENCH_RESUME_RUNS=3
bench_resume_case() {
    local k run i first tail_samples at_zero=() at_half=() runs=()
    k=$((BENCH_SAMPLES / 64 / 2))
    echo "== resume: time to the first batch at batch $k of $((BENCH_SAMPLES / 64)) against" \
        "batch 0 (a fresh prestod each, cold cache)"
    BENCH_DATASET=bench
    for ((i = 0; i < BENCH_RESUME_RUNS; i++)); do
        for start in 0 "$k"; do
            presto_start -d "bench=$BENCH_DATA"
            run=$(presto_ctl epoch bench -e 0 --start-batch "$start" --json)
            presto_stop
            first=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["first_batch_s"])' \
                "$run")
            [[ $start == 0 ]] || tail_samples=$("$PYTHON" -c \
                'import json, sys; print(json.loads(sys.argv[1])["samples"])' "$run")
            echo "  start_batch $start: first batch after $("$PYTHON" -c \
                'import sys; print("%.1f ms" % (float(sys.argv[1]) * 1e3))' "$first")"
            if [[ $start == 0 ]]; then at_zero+=("$first"); else at_half+=("$first"); fi
        done
    done
    for ((i = 0; i < BENCH_RESUME_RUNS; i++)); do
        runs+=("$("$PYTHON" -c 'import json, statistics, sys
half, samples = float(sys.argv[1]), int(sys.argv[2]); zero = [float(x) for x in sys.argv[3:]]
print(json.dumps({"samples": samples, "seconds": half, "samples_per_s": 64 / half,
                  "first_batch_s": half, "reference": "resume at batch 0",
                  "reference_samples_per_s": 64 / statistics.median(zero)}))' \
            "${at_half[$i]}" "$tail_samples" "${at_zero[@]}")")
    done
    bench_case resume 0.5 "${runs[@]}"
}

# torchvision's ImageNet training transforms on a 256-pixel image (resize cached):
# cold-train-resize256, warm-train-resize256; then cases_recipes.sh's.
bench_train_cases() {
    local config
    config=$(bench_config train resize decode "{resize: 256}" \
        "{random_resized_crop: 224}" "{random_flip: 0.5}" \
        "{normalize: {mean: $MEAN, std: $STD, layout: nchw}}")
    echo "== cold-train-resize256, warm-train-resize256: resize 256 cached;" \
        "random_resized_crop 224, flip, normalize (float32 NCHW) online (a different" \
        "augmentation: crops of the 256-pixel image)"
    BENCH_DATASET=train
    presto_start -c "$config"
    bench_epoch 0
    bench_case_vs train cold-train-resize256 1 "$BENCH_RESULT"
    bench_warm_epochs
    bench_case_vs train warm-train-resize256 15 "${BENCH_WARM[@]}"
    presto_stop
    if declare -F bench_recipes_cases >/dev/null; then
        bench_recipes_cases
    fi
}

# bench_group NAME: whether BENCH_ONLY selects the group of cases NAME.
bench_group() {
    [[ -z ${BENCH_ONLY:-} || ,$BENCH_ONLY, == *,$1,* ]]
}

bench_main() {
    local g
    local only=${BENCH_ONLY:-}
    for g in ${only//,/ }; do
        case $g in
        default | split | train | disk | fuse | cluster | sources | profile | audio) ;;
        *) echo "error: BENCH_ONLY: no group of cases '$g'" \
            "(default, split, train, disk, fuse, cluster, sources, profile, audio)" >&2; exit 2 ;;
        esac
    done
    for prog in prestod prestoctl; do
        [[ -x $BUILD/$prog ]] || { echo "error: $BUILD/$prog is missing; run make" >&2; exit 1; }
    done

    BENCH_DATA="$BUILD/bench-data"
    if [[ ${BENCH_ONLY:-} != audio ]]; then # the audio cases make their own data set
    echo "== data set: $BENCH_SAMPLES JPEGs in $BENCH_CLASSES classes, made from real photos"
    "$PYTHON" tests/tools/mkdataset.py --out "$BENCH_DATA" --count "$BENCH_SAMPLES" \
        --classes "$BENCH_CLASSES"
    BENCH_DATA=$(cd "$BENCH_DATA" && pwd)
    fi
    local data=$BENCH_DATA # the name hooks written for the earlier script use

    presto_init
    local recipes_cases=tests/bench/cases_recipes.sh
    if [[ -f $recipes_cases ]]; then
        # shellcheck source=/dev/null
        source "$recipes_cases"
    fi
    BENCH_CASES=$PRESTO_TMP/cases.jsonl
    : >"$BENCH_CASES"

    local baselines=()
    if bench_group default || bench_group split || bench_group train; then
        echo "== baseline eval: torchvision ImageFolder + DataLoader ($(nproc) workers," \
            "batch 64): Resize(256), CenterCrop(224), RandomHorizontalFlip, PILToTensor"
        bench_baseline eval --transforms eval
        echo "== baseline train: RandomResizedCrop(224), RandomHorizontalFlip, ToTensor," \
            "Normalize"
        bench_baseline train --transforms train
        baselines=(--baseline "$PRESTO_TMP/baseline-eval.json"
            --extra-baseline "train=$PRESTO_TMP/baseline-train.json")
        if bench_group train && declare -F bench_recipes_baselines >/dev/null; then
            local extra
            extra=$(bench_recipes_baselines) || presto_fail "the recipe baseline failed"
            # shellcheck disable=SC2206
            baselines+=($extra)
        fi
    fi

    if bench_group default; then
        bench_default_cases
        bench_resume_case
    fi
    if bench_group split; then bench_split_cases; fi
    if bench_group train; then bench_train_cases; fi

    BENCH_DATASET=bench
    local disk_cases=tests/bench/cases_disk.sh
    if [[ -f $disk_cases ]]; then
        # shellcheck source=/dev/null
        source "$disk_cases"
    fi
    if bench_group disk && declare -F bench_disk_cases >/dev/null; then
        bench_disk_cases "$BENCH_DATA"
    fi
    local fuse_cases=tests/bench/cases_fuse.sh
    if [[ -f $fuse_cases ]]; then
        # shellcheck source=/dev/null
        source "$fuse_cases"
    fi
    if bench_group fuse && declare -F bench_fuse_cases >/dev/null; then
        bench_fuse_cases
    fi
    local cluster_cases=tests/bench/cases_cluster.sh
    if [[ -f $cluster_cases ]]; then
        # shellcheck source=/dev/null
        source "$cluster_cases"
    fi
    if bench_group cluster && declare -F bench_cluster_cases >/dev/null; then
        bench_cluster_cases "$BENCH_DATA"
    fi
    local sources_cases=tests/bench/cases_sources.sh
    if [[ -f $sources_cases ]]; then
        # shellcheck source=/dev/null
        source "$sources_cases"
    fi
    if bench_group sources && declare -F bench_sources_cases >/dev/null; then
        bench_sources_cases "$BENCH_DATA"
    fi
    local profile_cases=tests/bench/cases_profile.sh
    if [[ -f $profile_cases ]]; then
        # shellcheck source=/dev/null
        source "$profile_cases"
    fi
    if bench_group profile && declare -F bench_profile_cases >/dev/null; then
        bench_profile_cases "$BENCH_DATA"
    fi

    local audio_cases=tests/bench/cases_audio.sh
    if [[ -f $audio_cases ]]; then
        # shellcheck source=/dev/null
        source "$audio_cases"
    fi
    if bench_group audio && declare -F bench_audio_cases >/dev/null; then
        bench_audio_cases
    fi

    local stats=()
    [[ -f $PRESTO_TMP/stats.json ]] && stats=(--stats "$PRESTO_TMP/stats.json")
    "$PYTHON" tests/bench/report.py write "${baselines[@]}" --cases "$BENCH_CASES" \
        "${stats[@]}" --data "$BENCH_DATA" --out "$BUILD/bench.json"
}

# Sourced (tests/bench/bench_sources.sh) it only defines the helpers.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    bench_main "$@"
fi
