#!/usr/bin/env bash
# Each finished run's kept model on its fold's validation patients, scored on the original labels (--dice_grid input)
# with the run's own width (README.md here); the test patients are not read. Run from the same checkout as run.sh,
# after it:
#   OUT=docs/results/finetune-curves-r3_acdc bash docs/results/finetune-curves-r3_acdc/evaluate_val.sh
set -euo pipefail
OUT="${OUT:-docs/results/finetune-curves-r3_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
PAPER_WIDTH=(--features "[32,64,128,256,512,32]")
score() {  # run folder, overrides...
    local run="$1"
    shift
    [[ -f "$run/model/model.pt" && ! -f "$run/model/eval/dice.json" ]] || return 0
    python -m monai.bundle run --config_file bundles/gcl_acdc/configs/evaluate.json --split_file "$run/split.json" \
        --test_split val --work_dir "$run/model" --ckpt_dir "$run/model" --output_dir "$run/model" --num_workers 0 \
        --init random --dice_grid input "$@" > "$run/model/eval_val.log" 2>&1
}
for run in "$OUT"/runs/*_width512_*/; do
    score "${run%/}" "${PAPER_WIDTH[@]}"
done
for run in "$OUT"/runs/*_defaults_*/; do
    score "${run%/}"
done
python -m benchmarks.finetune_curves collect "$OUT"
