# shellcheck shell=bash
# `make bench` cases for audio (issue 18), sourced by bench.sh (which provides BUILD,
# PYTHON, PRESTO_TMP, BENCH_WARM_EPOCHS, bench_case, bench_epoch, bench_warm_epochs and
# demo.sh's presto_* helpers):
#
#   bench_audio_cases        (BENCH_ONLY=audio make bench)
#
# The data set: BENCH_AUDIO_CLIPS spoken words made by tests/tools/mkaudio.py (espeak-ng,
# ten words as classes; WAV, FLAC, MP3 and Ogg Vorbis; 16-48 kHz; a fifth stereo) in
# $BUILD/bench-audio (kept between runs). The baseline, measured in this run:
# tests/bench/torchaudio_baseline.py, torchaudio in a DataLoader with 2 workers (batch 64):
# load, mean to mono, functional.resample to 16 kHz, crop / zero pad to 16000 samples,
# MelSpectrogram(16000, n_mels=64); its best epoch is every case's reference. presto does
# the same work, the same output (float32 [1, 64, 81]):
#
#   steps: decode_audio {mono: true}, resample 16000, time_crop 16000,
#          mel_spectrogram {n_mels: 64}
#
#   audio-cold   epoch 0 of a fresh prestod (default split: everything offline, so the
#                first epoch decodes, resamples and computes every spectrogram), target 2x
#   audio-warm   epochs BENCH_WARM_EPOCHS from the memory tier (median), target 20x
#   audio-auto   split: auto with a disk tier: `prestoctl profile --apply` ranks every
#                strategy (split after decode_audio, resample, time_crop or the
#                spectrogram; raw or zstd 1/3/9), then epoch 0 fills the cache with the
#                winner and the warm epochs are measured (median), target 20x; the
#                profile's table goes to $BUILD/bench-audio-profile.{csv,json}.

BENCH_AUDIO_CLIPS=${BENCH_AUDIO_CLIPS:-3000}
BENCH_AUDIO_STEPS="[{decode_audio: {mono: true}}, {resample: 16000}, {time_crop: 16000}, {mel_spectrogram: {n_mels: 64}}]"

# audio_with_ref RUN_JSON RATE: the run with the torchaudio baseline as its reference.
audio_with_ref() {
    "$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1]); r["reference_samples_per_s"] = float(sys.argv[2])
r["reference"] = "torchaudio DataLoader, 2 workers"; print(json.dumps(r))' "$@"
}

# audio_config NAME SPLIT CACHE_DIR: a config serving the clips as NAME; prints its path.
audio_config() {
    local file="$PRESTO_TMP/audio-$1.yaml"
    cat >"$file" <<EOF
cache:
  dir: $3
  disk: 16GiB
datasets:
  - name: $1
    root: "$BENCH_AUDIO_DATA"
    steps: $BENCH_AUDIO_STEPS
$([[ $2 == default ]] || echo "    split: $2")
EOF
    printf '%s\n' "$file"
}

bench_audio_cases() {
    BENCH_AUDIO_DATA=$BUILD/bench-audio
    echo "== audio data set: $BENCH_AUDIO_CLIPS spoken words (mkaudio.py: espeak-ng; WAV," \
        "FLAC, MP3, Ogg)"
    "$PYTHON" tests/tools/mkaudio.py --out "$BENCH_AUDIO_DATA" --count "$BENCH_AUDIO_CLIPS" \
        --jobs "$(nproc)" || presto_fail "mkaudio.py failed"
    BENCH_AUDIO_DATA=$(cd "$BENCH_AUDIO_DATA" && pwd)

    echo "== baseline audio: torchaudio DataLoader (2 workers, batch 64): load, mean," \
        "resample 16 kHz, crop/pad 16000, MelSpectrogram(n_mels=64)"
    local base rate
    base=$(cd tests/bench && "$PYTHON" torchaudio_baseline.py "$BENCH_AUDIO_DATA" \
        --epochs 2 --workers 2) || presto_fail "torchaudio_baseline.py failed"
    "$PYTHON" -c 'import json, sys
for i, e in enumerate(json.loads(sys.argv[1])["epochs"]):
    print("  epoch %d: %.1f samples/s (%d samples, %.2f s)"
          % (i, e["samples_per_s"], e["samples"], e["seconds"]))' "$base"
    rate=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["samples_per_s"])' \
        "$base")

    local dir=$PRESTO_TMP/audio runs=() line conf
    mkdir -p "$dir"
    echo "== audio-cold, audio-warm: decode_audio, resample, time_crop, mel_spectrogram" \
        "all offline (the default split)"
    BENCH_DATASET=audio
    conf=$(audio_config audio default "$dir/cache-default")
    presto_start -c "$conf"
    bench_epoch 0
    bench_case audio-cold 2 "$(audio_with_ref "$BENCH_RESULT" "$rate")"
    bench_warm_epochs
    for line in "${BENCH_WARM[@]}"; do runs+=("$(audio_with_ref "$line" "$rate")"); done
    bench_case audio-warm 20 "${runs[@]}"
    presto_stop

    echo "== audio-auto: split: auto (the profiler ranks every audio strategy)"
    BENCH_DATASET=audio-auto
    conf=$(audio_config audio-auto auto "$dir/cache-auto")
    presto_start -c "$conf"
    presto_ctl profile audio-auto --apply --csv "$BUILD/bench-audio-profile.csv" \
        --json "$BUILD/bench-audio-profile.json"
    echo "  (epoch 0 fills the cache with the chosen strategy)"
    bench_epoch 0
    bench_warm_epochs
    runs=()
    for line in "${BENCH_WARM[@]}"; do runs+=("$(audio_with_ref "$line" "$rate")"); done
    bench_case audio-auto 20 "${runs[@]}"
    presto_stop
    BENCH_DATASET=bench
}
