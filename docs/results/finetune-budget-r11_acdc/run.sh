#!/usr/bin/env bash
# Round 11 (README.md here): full supervision with the chosen recipe (batch 20, 192 x 192, channels-last) over a
# cosine of 5000 iterations instead of 2500, folds 0-4, in float32 (amendment 1); the 2500-iteration arm is
# round 8's. Each run is scored as soon as it has trained: its fold's validation patients into this folder and,
# sealed, the test patients into the full-supervision gate's folder. Run from a checkout at a fixed commit (a
# worktree ft53r11, its parent folder RUNS_ROOT), one or two streams side by side:
#   AMP=False DATA=../shared/data OUT=docs/results/finetune-budget-r11_acdc bash docs/results/finetune-budget-r11_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint
# (every 50 iterations), a run not yet scored is scored.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-budget-r11_acdc}"
GATE="${GATE:-docs/results/gate-fullsup_acdc}"
RUNS_ROOT="${RUNS_ROOT:-..}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
# shellcheck source=benchmarks/precision.sh
source "$(dirname "$0")/../../../benchmarks/precision.sh"
RECIPE="$(amp_recipe batch20_grid192_it5000)"
FULLSUP='fullsup={"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
job() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 5000 \
    --val-every 500 --checkpoint-every 50 --fold "$1" --recipe "$RECIPE" -- --batch_size 20 --image_size "[192,192]" \
    --channels_last True --amp "$AMP"; }
score_job() {
    local run="f${1}_${RECIPE}_Lfull_d0_s0"
    python -m benchmarks.score_val score "$OUT" --run "$run" --runs-root "$RUNS_ROOT" --data-dir "$DATA/acdc" \
        --scoring "$FULLSUP" --scoring bilinear='{"pred_interp": "bilinear"}'
    python -m benchmarks.score_val score "$GATE" --split test --run "$run" --runs-root "$RUNS_ROOT" \
        --data-dir "$DATA/acdc" --scoring "$FULLSUP" --scoring nearest='{"pred_interp": "nearest"}'
}
run_queue "${1:?usage: run.sh STREAM_NAME}" 5 >> "$OUT/stream_${1}.log" 2>&1
