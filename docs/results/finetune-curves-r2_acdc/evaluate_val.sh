#!/usr/bin/env bash
# Each finished run's kept model on its fold's validation patients, scored on the original labels (--dice_grid input:
# the prediction inverted to the data's pixels), round 2's native runs with their own grid overrides and round 1's
# resize runs (R1: round 1's output folder, holding its models) with the defaults (README.md here); the test patients
# are not read. Run from the same checkout as run.sh, after it:
#   OUT=docs/results/finetune-curves-r2_acdc R1=docs/results/finetune-curves_acdc \
#       bash docs/results/finetune-curves-r2_acdc/evaluate_val.sh
set -euo pipefail
OUT="${OUT:-docs/results/finetune-curves-r2_acdc}"
R1="${R1:-docs/results/finetune-curves_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
NATIVE=(--grid native --image_size "[176,176]" --fov_scale 1.0)
score() {  # run folder, output folder, overrides...
    local run="$1" target="$2"
    shift 2
    [[ -f "$run/model/model.pt" && ! -f "$target/eval/dice.json" ]] || return 0
    mkdir -p "$target"
    python -m monai.bundle run --config_file bundles/gcl_acdc/configs/evaluate.json --split_file "$run/split.json" \
        --test_split val --work_dir "$target" --ckpt_dir "$run/model" --output_dir "$target" --num_workers 0 \
        --init random --dice_grid input "$@" > "$target/eval_val.log" 2>&1
}
for run in "$OUT"/runs/*_native176_*/; do
    score "${run%/}" "${run%/}/model" "${NATIVE[@]}"
done
for run in "$R1"/runs/f0_defaults_*/; do
    run="${run%/}"
    score "$run" "$OUT/runs/r1_$(basename "$run")/model"
done
python -m benchmarks.finetune_curves collect "$OUT"
