#!/usr/bin/env bash
# Each finished run's kept model on its fold's validation patients, with the evaluation variants (README.md here);
# the test patients are not read. Run from the same checkout as run.sh, after it:
#   OUT=docs/results/finetune-curves_acdc bash docs/results/finetune-curves_acdc/evaluate_val.sh
set -euo pipefail
OUT="${OUT:-docs/results/finetune-curves_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
for run in "$OUT"/runs/*/; do
    run="${run%/}"
    [[ -f "$run/model/model.pt" && ! -f "$run/model/eval/dice.json" ]] || continue
    python -m monai.bundle run --config_file bundles/gcl_acdc/configs/evaluate.json --split_file "$run/split.json" \
        --test_split val --work_dir "$run" --ckpt_dir "$run/model" --output_dir "$run/model" --num_workers 0 \
        --init random > "$run/eval_val.log" 2>&1
done
python -m benchmarks.finetune_curves collect "$OUT"
