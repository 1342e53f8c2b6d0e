# shellcheck shell=bash
# `make bench` cases for the strategy profiler, sourced by bench.sh (which provides
# BUILD, PYTHON, PRESTO_TMP, BENCH_DATA, BENCH_WARM_EPOCHS, bench_case, bench_epoch and
# demo.sh's presto_* helpers):
#
#   bench_profile_cases [DATA_DIR]      (default: $BENCH_DATA)
#
# 1. The table: prestod serves DATA_DIR as `bench` with the ImageNet-style eval
#    pipeline (decode, resize 256, center_crop 224, random_flip) and `split: auto`, a
#    disk tier and the default memory budget; `prestoctl profile bench --apply` measures
#    every strategy (split point x raw/zstd:1/zstd:3/zstd:9) on the daemon's default
#    sample (2% of the dataset, at least 64) and prints the table of all of them; its
#    CSV, JSON and SVG go to $BUILD/bench-profile.{csv,json,svg}, the daemon's log lines
#    about it (the disk's bandwidth, where measured) to $BUILD/bench-profile-daemon.log.
#    --apply switches the dataset to the winner.
# 2. Case `auto`: epoch 0 fills the cache with the chosen strategy, then the warm epochs
#    BENCH_WARM_EPOCHS are pulled (median reported). Its reference, measured in this
#    run: the same epochs from a prestod serving the same steps with `split: 0`
#    (everything online, the untuned choice); the case's ratio is auto over that.
# 3. Beside it, the worst strategy of the profile that caches anything (lowest expected
#    throughput with split > 0; everything online, the reference, is usually the worst
#    of all) measured the same way: its own prestod with that split and encoding, epoch
#    0 to fill, then the warm epochs. auto / worst is printed and kept in bench.json with
#    the case's runs (worst_strategy, worst_samples_per_s).
# 4. Case `profile-accuracy`: tests/bench/profile_accuracy.py takes the profile of 1.
#    and, for each of its 13 strategies in a prestod of its own, pulls a cold epoch
#    (source files dropped from the page cache), warm epochs from memory and from the
#    disk tier (memory budget 1 MiB, segments dropped before each) and prints predicted
#    against measured; the case's ratio is the worst max(predicted/measured,
#    measured/predicted) over all of them (target <= 1.25). Its table goes to
#    $BUILD/bench-profile-accuracy.json. BENCH_PROFILE_ONLY=NAME,... measures only those.
#    The audio strategies join the same case: BENCH_PROFILE_AUDIO_CLIPS (600) spoken words
#    made by tests/tools/mkaudio.py (espeak-ng; WAV, FLAC, MP3, Ogg; kept in
#    $BUILD/bench-profile-audio) with the audio cases' pipeline (decode_audio mono,
#    resample 16000, time_crop 16000, mel_spectrogram 64) are profiled and each of their
#    17 strategies measured the same way (rows "audio ..."; the table in
#    $BUILD/bench-profile-accuracy-audio.json); the case's ratio is the worst over both.
#    Where mkaudio.py cannot make the clips (no espeak-ng), the case says so and keeps
#    the images' rows alone.
#    Each row also says how fast the machine was when its epochs ran against when the
#    profile ran (machine_speed_vs_profile: one thread's JPEG decodes per second of the
#    bench photos, profile_accuracy.py --speed, taken around the profile and before each
#    strategy's epochs), to tell a slower machine from a model error; nothing is
#    divided by it.

BENCH_PROFILE_STEPS="[decode, {resize: 256}, {center_crop: 224}, {random_flip: 0.5}]"
BENCH_PROFILE_AUDIO_CLIPS=${BENCH_PROFILE_AUDIO_CLIPS:-600}
BENCH_PROFILE_AUDIO_STEPS="[{decode_audio: {mono: true}}, {resample: 16000}, {time_crop: 16000}, {mel_spectrogram: {n_mels: 64}}]"

# profile_config NAME SPLIT ENCODING CACHE_DIR: a config serving the data as NAME;
# prints its path.
profile_config() {
    local name=$1 split=$2 encoding=$3 cache=$4 file="$PRESTO_TMP/profile-$1.yaml"
    cat >"$file" <<EOF
cache:
  dir: $cache
  disk: 64GiB
datasets:
  - name: $name
    root: $BENCH_PROFILE_DATA
    steps: $BENCH_PROFILE_STEPS
    split: $split
    encoding: $encoding
EOF
    printf '%s\n' "$file"
}

# profile_epochs NAME: epoch 0 (fills the cache), then the warm epochs; leaves their
# JSON lines in BENCH_WARM.
profile_epochs() {
    # shellcheck disable=SC2034 # bench.sh's bench_epoch pulls BENCH_DATASET
    BENCH_DATASET=$1
    echo "  (epoch 0 fills the cache)"
    bench_epoch 0
    bench_warm_epochs
}

# profile_forget CACHE_DIR: removes a case's cache once its daemon has stopped. The
# records it left (1.8 GB for decode/raw) are dead to the cases after it, but while
# their files exist they hold the page cache, and every case after them gets its
# memory from what is left: on make bench's VM a fresh page then costs up to 3x more
# to fault in (decode/raw's cold epoch: 2.0 s of system time in a clean state, 5.9-6.7 s
# behind four such caches; the same 476k page faults), and the profile-accuracy case
# measured the cold epoch 1.3-1.9x under what the profile, made before those caches
# existed, predicted.
profile_forget() {
    rm -rf "$1"
}

# profile_median JSON...: the median samples_per_s of prestoctl epoch lines.
profile_median() {
    "$PYTHON" -c 'import json, statistics, sys
print(statistics.median(json.loads(a)["samples_per_s"] for a in sys.argv[1:]))' "$@"
}

bench_profile_cases() {
    BENCH_PROFILE_DATA=${1:-$BENCH_DATA}
    local dir=$PRESTO_TMP/profile conf out="$BUILD/bench-profile"
    mkdir -p "$dir"

    echo "== profile: every strategy of decode, resize 256, center_crop 224, random_flip" \
        "(split: auto, disk tier, default memory budget)"
    conf=$(profile_config bench auto raw "$dir/cache-auto")
    presto_start -c "$conf"
    # The machine's speed around the profile (profile_accuracy.py --speed): the
    # accuracy case compares it with the speed before each strategy's epochs.
    local speed=(--tmp "$dir" --data "$BENCH_PROFILE_DATA" --speed) ref0 ref1
    ref0=$("$PYTHON" tests/bench/profile_accuracy.py "${speed[@]}")
    presto_ctl profile bench --apply --csv "$out.csv" --json "$out.json" --svg "$out.svg"
    # The daemon's lines about the profile (the disk's bandwidth where it was measured).
    grep -a "profile" "$PRESTO_LOG" >"$out-daemon.log" || true
    ref1=$("$PYTHON" tests/bench/profile_accuracy.py "${speed[@]}")
    local chosen worst
    read -r chosen worst < <("$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
st = d["strategies"]
w = min((s for s in st if s["split"] > 0), key=lambda s: s["expected_samples_per_s"])
print(st[d["winner"]]["name"], w["name"])' "$out.json")
    presto_ctl datasets | "$PYTHON" -c 'import json, sys
d = json.load(sys.stdin)["datasets"][0]
print("  in force: split %d, %s (%s)" % (d["split"], d["encoding"], d["auto"]["state"]))'

    echo "== auto: $chosen, warm epochs ${BENCH_WARM_EPOCHS[*]} (median reported)"
    profile_epochs bench
    local auto_runs=("${BENCH_WARM[@]}")
    presto_stop
    profile_forget "$dir/cache-auto"

    echo "== everything online (split: 0): the reference of auto"
    conf=$(profile_config bench 0 raw "$dir/cache-online")
    presto_start -c "$conf"
    profile_epochs bench
    local online
    online=$(profile_median "${BENCH_WARM[@]}")
    presto_stop
    profile_forget "$dir/cache-online"

    local worst_rate wsplit wenc
    read -r wsplit wenc < <("$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
s = [s for s in d["strategies"] if s["name"] == sys.argv[2]][0]
print(s["split"], s["encoding"])' "$out.json" "$worst")
    echo "== the profile's worst caching strategy: $worst (split $wsplit, $wenc)"
    conf=$(profile_config bench "$wsplit" "$wenc" "$dir/cache-worst")
    presto_start -c "$conf"
    profile_epochs bench
    worst_rate=$(profile_median "${BENCH_WARM[@]}")
    presto_stop
    profile_forget "$dir/cache-worst"

    local runs=() r
    for r in "${auto_runs[@]}"; do
        runs+=("$("$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1])
r.update({"reference": "everything-online",
          "reference_detail": "the same epochs from prestod with split: 0 (every step "
                              "online), measured in this run",
          "reference_samples_per_s": float(sys.argv[2]), "strategy": sys.argv[3],
          "worst_strategy": sys.argv[4], "worst_samples_per_s": float(sys.argv[5])})
print(json.dumps(r))' "$r" "$online" "$chosen" "$worst" "$worst_rate")")
    done
    local auto
    auto=$(profile_median "${auto_runs[@]}")
    "$PYTHON" -c 'import sys
chosen, auto, online, worst, worst_rate = sys.argv[1], *map(float, sys.argv[2:4]), \
    sys.argv[4], float(sys.argv[5])
print("  auto (%s): %.1f samples/s; everything online: %.1f (%.2fx); worst caching strategy %s: "
      "%.1f (%.2fx)" % (chosen, auto, online, auto / online if online else 0, worst,
                        worst_rate, auto / worst_rate if worst_rate else 0))' \
        "$chosen" "$auto" "$online" "$worst" "$worst_rate"
    bench_case auto 3 "${runs[@]}"

    echo "== profile-accuracy: the profile's predictions against real epochs of each strategy"
    local only=()
    [[ -n ${BENCH_PROFILE_ONLY:-} ]] && only=(--only "$BENCH_PROFILE_ONLY")
    local images="$BUILD/bench-profile-accuracy.json" audio="$BUILD/bench-profile-audio"
    "$PYTHON" tests/bench/profile_accuracy.py --build "$BUILD" --data "$BENCH_PROFILE_DATA" \
        --tmp "$dir/accuracy" --steps "$BENCH_PROFILE_STEPS" --profile "$out.json" \
        --epochs "${#BENCH_WARM_EPOCHS[@]}" --out "$images" "${only[@]}" \
        --reference "$("$PYTHON" -c 'import sys; print((float(sys.argv[1]) + float(sys.argv[2])) / 2)' "$ref0" "$ref1")" \
        || presto_fail "profile-accuracy failed"
    echo "== profile-accuracy, audio: $BENCH_PROFILE_AUDIO_CLIPS spoken words (mkaudio.py)," \
        "decode_audio, resample, time_crop, mel_spectrogram: profiled, then each strategy"
    local case=(--case-file "$BENCH_CASES" "${only[@]}")
    if "$PYTHON" tests/tools/mkaudio.py --out "$audio" --count "$BENCH_PROFILE_AUDIO_CLIPS" \
        --jobs "$(nproc)"; then
        "$PYTHON" tests/bench/profile_accuracy.py --build "$BUILD" --data "$audio" \
            --tmp "$dir/accuracy-audio" --steps "$BENCH_PROFILE_AUDIO_STEPS" --label audio \
            --ref-data "$BENCH_PROFILE_DATA" \
            --epochs "${#BENCH_WARM_EPOCHS[@]}" --out "$BUILD/bench-profile-accuracy-audio.json" \
            --merge "$images" "${case[@]}" || presto_fail "profile-accuracy (audio) failed"
    else
        echo "  mkaudio.py could not make the clips: the case has the images' strategies only"
        "$PYTHON" tests/bench/profile_accuracy.py --build "$BUILD" --data "$BENCH_PROFILE_DATA" \
            --tmp "$dir/accuracy" --profile "$out.json" --only "" --merge "$images" \
            --case-file "$BENCH_CASES" || presto_fail "profile-accuracy failed"
    fi
}
