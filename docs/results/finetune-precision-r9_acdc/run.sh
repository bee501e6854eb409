#!/usr/bin/env bash
# Round 9 (README.md here): full supervision at batch 20 on the 192 x 192 grid, channels-last, with --amp True
# (bfloat16 autocast of the training forward pass), folds 0-4; the float32 arm is round 8's. Run from a checkout at
# a fixed commit, one or two streams side by side:
#   DATA=../shared/data OUT=docs/results/finetune-precision-r9_acdc bash docs/results/finetune-precision-r9_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-precision-r9_acdc}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
job() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 \
    --val-every 500 --fold "$1" --recipe batch20_grid192_bf16 -- --batch_size 20 --image_size "[192,192]" \
    --channels_last True --amp True; }
run_queue "${1:?usage: run.sh STREAM_NAME}" 5 >> "$OUT/stream_${1}.log" 2>&1
