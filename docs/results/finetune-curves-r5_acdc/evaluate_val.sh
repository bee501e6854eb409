#!/usr/bin/env bash
# Each finished run's kept model on fold 0's validation patients, scored on the original labels (--dice_grid input;
# README.md here); the test patients are not read. Run from the same checkout as run.sh, after it (or between runs):
#   OUT=docs/results/finetune-curves-r5_acdc bash docs/results/finetune-curves-r5_acdc/evaluate_val.sh
set -euo pipefail
OUT="${OUT:-docs/results/finetune-curves-r5_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
CONFIGS="['bundles/gcl_acdc/configs/train.json','bundles/gcl_acdc/configs/evaluate.json']"
for final in "0,batch20,full,0,0,2500,:f0_batch20_Lfull_d0_s0" "0,defaults,full,0,0,6000,:f0_defaults_Lfull_d0_s0"; do
    row="${final%%:*}" run="$OUT/runs/${final##*:}"
    # only a finished run (its last row is in curves.csv), whose kept model is final, and only once
    grep -q "^$row" "$OUT/curves.csv" 2>/dev/null || continue
    [[ -f "$run/model/model.pt" && ! -f "$run/model/eval/dice.json" ]] || continue
    python -m monai.bundle run --config_file "$CONFIGS" --split_file "$run/split.json" --test_split val \
        --work_dir "$run/model" --ckpt_dir "$run/model" --output_dir "$run/model" --num_workers 0 --init random \
        --dice_grid input > "$run/model/eval_val.log" 2>&1
done
python -m benchmarks.finetune_curves collect "$OUT"
