# shellcheck shell=bash
# Training recipes (issue 17), sourced by bench.sh; bench_recipes_cases runs in the
# train group (BENCH_ONLY=train), after the resize-256 cases, with bench.sh's helpers.
#
# Against the train baseline (torchvision RandomResizedCrop(224), RandomHorizontalFlip,
# ToTensor, Normalize in a DataLoader, 2 workers), the functionally identical pipeline:
#   warm-train            decode cached (full-resolution pixels); random_resized_crop 224,
#                         flip, normalize (float32 NCHW) online; warm epochs
#   cold-train            the same, nothing cached (split 0): every epoch decodes, and
#                         decode + random_resized_crop decode only the crop's region
#                         (jpeg_roi); the median of three epochs
#   cold-train-wholedecode  the same with pad 0 between decode and the crop (a copy of
#                         the image, the one difference) so the whole JPEG is decoded:
#                         what the region decoding saves, in the daemon
# Against the recipe baseline (torchvision's reference recipe: RandomResizedCrop(224),
# RandomHorizontalFlip, TrivialAugmentWide (bilinear), PILToTensor, ConvertImageDtype,
# Normalize, RandomErasing(0.1) in a DataLoader, 2 workers; with mixup 0.2 / cutmix 1.0
# in the collate function as references/classification/train.py writes it,
# tests/tools/tvmix.py, when presto has its batch steps):
#   train-recipe, train-recipe-cold  warm (decode cached) and cold (split 0, region
#                         decoding), the same transforms
#   (train-recipe-nomix, train-recipe-nomix-cold and their baseline without the collate
#   mixing while presto has no mixup/cutmix step)
# And:
#   roi-decode            tests/bench/roibench: one thread decoding RandomResizedCrop
#                         boxes of the bench JPEGs, the region alone against the whole
#                         image cut to the box (pixels checked equal); ratio = full over
#                         region
#   step costs            tests/bench/stepbench: one thread, 200 JPEGs x 4 seeds, each
#                         online image step alone (random_resized_crop, random_flip,
#                         normalize into batch slots, the three fused as the pipeline runs
#                         them, with fused_equal: the same floats; each TrivialAugmentWide
#                         op, bilinear),
#                         microseconds of CPU per call and a digest of the outputs (no
#                         ratio: the figures the per-step lines below come from, measured
#                         without a daemon)
# After each presto case the step costs of its daemon (stats: seconds / calls per step)
# are printed: what each step costs per sample on a worker thread.

NORM="{normalize: {mean: $MEAN, std: $STD, layout: nchw}}"

# Whether this build has the batch-level mixup/cutmix steps (branch batch).
bench_recipes_mix_steps() {
    grep -q '"mixup"' daemon/steps/step.c 2>/dev/null
}

# bench_recipes_step_costs: each step's mean time per call in the running prestod.
bench_recipes_step_costs() {
    presto_ctl stats | "$PYTHON" -c 'import json, sys
steps = json.load(sys.stdin)["steps"]
parts = ["%s %.1f us" % (name, s["seconds"] / s["calls"] * 1e6)
         for name, s in steps.items() if s.get("calls")]
print("  per sample (one worker thread): " + ", ".join(parts))'
}

# bench_recipes_epochs NAME SPLIT STEPS...: a prestod serving the steps as NAME; epoch 0
# (cold: nothing cached yet), then BENCH_WARM_EPOCHS into BENCH_WARM.
bench_recipes_epochs() {
    local name=$1 split=$2 config
    shift 2
    config=$(bench_config "$name" "$split" "$@")
    BENCH_DATASET=$name
    presto_start -c "$config"
    bench_epoch 0
    BENCH_COLD=$BENCH_RESULT
    bench_warm_epochs
    bench_recipes_step_costs
    presto_stop
}

bench_recipes_roi_case() {
    local out runs=()
    echo "== roi-decode: RandomResizedCrop boxes decoded alone against whole (roibench," \
        "one thread, 400 JPEGs x 3)"
    out=$("$BUILD/roibench" "$BENCH_DATA" 400 3) || presto_fail "roibench failed"
    echo "  $out"
    runs+=("$("$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1])
print(json.dumps({"samples": r["crops"], "seconds": r["crops"] * r["roi_us"] / 1e6,
                  "samples_per_s": 1e6 / r["roi_us"], "reference": "full decode",
                  "reference_samples_per_s": 1e6 / r["full_us"]}))' "$out")")
    bench_case roi-decode 0 "${runs[@]}"
}

bench_recipes_step_bench() {
    local out
    echo "== step costs: each online image step alone (stepbench, one thread, 200 JPEGs x 4)"
    out=$("$BUILD/stepbench" "$BENCH_DATA" 4 200) || presto_fail "stepbench failed"
    "$PYTHON" -c 'import json, sys
r = json.loads(sys.argv[1])
print("  " + ", ".join("%s %.1f us" % (k, v["us"]) for k, v in r.items()
                       if isinstance(v, dict)))
print("  trivial_augment_wide (mean of its 14 ops): %.1f us" % r["trivial_augment_wide_mean_us"])
if "fused_equal" in r:
    print("  crop + flip + normalize fused: the same floats as apart: %s" % r["fused_equal"])' "$out"
}

bench_recipes_cases() {
    local crop="{random_resized_crop: 224}" flip="{random_flip: 0.5}" recipe mix=()
    echo "== warm-train: decode cached; random_resized_crop 224 on the full-resolution" \
        "pixels, flip, normalize online (torchvision's train transforms, identical)"
    bench_recipes_epochs train-full decode decode "$crop" "$flip" "$NORM"
    bench_case_vs train warm-train 20 "${BENCH_WARM[@]}"

    echo "== cold-train: nothing cached (split 0): region decoding of each crop, flip," \
        "normalize"
    bench_recipes_epochs train-cold 0 decode "$crop" "$flip" "$NORM"
    bench_case_vs train cold-train 3 "$BENCH_COLD" "${BENCH_WARM[@]}"

    echo "== cold-train-wholedecode: the same with pad 0 after decode (whole-image decode)"
    bench_recipes_epochs train-cold-whole 0 decode "{pad: 0}" "$crop" "$flip" "$NORM"
    bench_case_vs train cold-train-wholedecode 0 "$BENCH_COLD" "${BENCH_WARM[@]}"

    recipe=("$crop" "$flip" "{trivial_augment_wide: {interpolation: bilinear}}" "$NORM"
        "{random_erasing: {p: 0.1}}")
    local name=train-recipe baseline=recipe
    if bench_recipes_mix_steps; then
        mix=("{mixup: {alpha: 0.2, num_classes: $BENCH_CLASSES}}"
            "{cutmix: {alpha: 1.0, num_classes: $BENCH_CLASSES}}")
    else
        name=train-recipe-nomix baseline=recipe-nomix
        echo "== (no mixup/cutmix step in this build: $name against the recipe without" \
            "the collate mixing)"
    fi
    echo "== $name: decode cached; RRC 224, flip, trivial_augment_wide, normalize," \
        "random_erasing 0.1${mix:+, mixup 0.2 / cutmix 1.0}"
    bench_recipes_epochs "$name" decode decode "${recipe[@]}" "${mix[@]}"
    bench_case_vs "$baseline" "$name" 10 "${BENCH_WARM[@]}"
    echo "== $name-cold: the same, nothing cached (region decoding)"
    bench_recipes_epochs "$name-cold" 0 decode "${recipe[@]}" "${mix[@]}"
    bench_case_vs "$baseline" "$name-cold" 0 "$BENCH_COLD" "${BENCH_WARM[@]}"

    bench_recipes_roi_case
    bench_recipes_step_bench
}

# The baselines these cases are measured against (besides train): recipe or
# recipe-nomix; prints the --extra-baseline arguments for report.py.
bench_recipes_baselines() {
    if bench_recipes_mix_steps; then
        echo "== baseline recipe: the reference recipe's transforms, mixup 0.2 / cutmix 1.0" \
            "in the collate function" >&2
        bench_baseline recipe --transforms recipe --mix 0.2,1.0 >&2
        echo "--extra-baseline recipe=$PRESTO_TMP/baseline-recipe.json"
    else
        echo "== baseline recipe-nomix: the reference recipe's transforms, no mixing" >&2
        bench_baseline recipe-nomix --transforms recipe >&2
        echo "--extra-baseline recipe-nomix=$PRESTO_TMP/baseline-recipe-nomix.json"
    fi
}
