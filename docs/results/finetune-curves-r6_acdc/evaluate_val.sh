#!/usr/bin/env bash
# Each finished run's kept model on its fold's validation patients, scored on the original labels (--dice_grid input;
# README.md here); the test patients are not read. Run from the same checkout as run.sh, after it (or between runs):
#   OUT=docs/results/finetune-curves-r6_acdc bash docs/results/finetune-curves-r6_acdc/evaluate_val.sh
set -euo pipefail
OUT="${OUT:-docs/results/finetune-curves-r6_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
CONFIGS="['bundles/gcl_acdc/configs/train.json','bundles/gcl_acdc/configs/evaluate.json']"
for run in "$OUT"/runs/f*_L*_d0_s0/; do
    run="${run%/}" name="$(basename "$run")"
    fold="${name%%_*}" fold="${fold#f}" recipe="${name#*_}" recipe="${recipe%_Lfull_d0_s0}"
    # only a finished run (its last row is in curves.csv), whose kept model is final, and only once
    grep -q "^$fold,$recipe,full,0,0,2500," "$OUT/curves.csv" 2>/dev/null || continue
    [[ -f "$run/model/model.pt" && ! -f "$run/model/eval/dice.json" ]] || continue
    grid=()
    [[ "$recipe" == *grid192 ]] && grid=(--image_size "[192,192]")
    python -m monai.bundle run --config_file "$CONFIGS" --split_file "$run/split.json" --test_split val \
        --work_dir "$run/model" --ckpt_dir "$run/model" --output_dir "$run/model" --num_workers 0 --init random \
        --dice_grid input "${grid[@]}" > "$run/model/eval_val.log" 2>&1
done
python -m benchmarks.finetune_curves collect "$OUT"
