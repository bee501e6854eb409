#!/usr/bin/env bash
# Round 10 (README.md here): random initialisation at L = 2 (draw 0) with the paper's width (32 .. 512), batch 20,
# 128 x 128, channels-last, folds 0-4; the default-width arm is round 7's batch-20 models (their committed rows).
# Each run is scored on its fold's validation patients as soon as it has trained (amendment 3). Run from a checkout
# at a fixed commit (a worktree ft53r10, its parent folder RUNS_ROOT), one or two streams side by side, with the
# precision round 9 chose:
#   AMP=False DATA=../shared/data OUT=docs/results/finetune-width-r10_acdc bash docs/results/finetune-width-r10_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint
# (every 50 iterations), a run not yet scored is scored.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-width-r10_acdc}"
RUNS_ROOT="${RUNS_ROOT:-..}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
# shellcheck source=benchmarks/precision.sh
source "$(dirname "$0")/../../../benchmarks/precision.sh"
RECIPE="$(amp_recipe batch20_width512)"
job() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled 2 --draw 0 --iterations 1500 \
    --val-every 250 --checkpoint-every 50 --fold "$1" --recipe "$RECIPE" -- --batch_size 20 \
    --features "[32,64,128,256,512,32]" --channels_last True --amp "$AMP"; }
score_job() { python -m benchmarks.score_val score "$OUT" --run "f${1}_${RECIPE}_L2_d0_s0" --runs-root "$RUNS_ROOT" \
    --data-dir "$DATA/acdc" --scoring bilinear='{"pred_interp": "bilinear"}'; }
run_queue "${1:?usage: run.sh STREAM_NAME}" 5 >> "$OUT/stream_${1}.log" 2>&1
