#!/usr/bin/env bash
# Round 9 (README.md here): full supervision at batch 20 on the 192 x 192 grid, channels-last, with --amp True
# (bfloat16 autocast of the training forward pass), folds 0-4; the float32 arm is round 8's. Run from a checkout at
# a fixed commit, one or two streams side by side:
#   DATA=../shared/data OUT=docs/results/finetune-precision-r9_acdc bash docs/results/finetune-precision-r9_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint
# (every 50 iterations), a run not yet scored is scored (amendment 1: each run scored on its fold's validation patients
# as soon as it has trained; the worktree ft53r9's parent folder is RUNS_ROOT).
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-precision-r9_acdc}"
RUNS_ROOT="${RUNS_ROOT:-..}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
job() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 \
    --val-every 500 --checkpoint-every 50 --fold "$1" --recipe batch20_grid192_bf16 -- --batch_size 20 --image_size "[192,192]" \
    --channels_last True --amp True; }
score_job() { python -m benchmarks.score_val score "$OUT" --run "f${1}_batch20_grid192_bf16_Lfull_d0_s0" \
    --runs-root "$RUNS_ROOT" --data-dir "$DATA/acdc" --scoring fullsup='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}' \
    --scoring bilinear='{"pred_interp": "bilinear"}'; }
run_queue "${1:?usage: run.sh STREAM_NAME}" 5 >> "$OUT/stream_${1}.log" 2>&1
