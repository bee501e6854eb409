#!/usr/bin/env bash
# The prostate full-supervision gate (README.md here): the bundle's full-supervision recipe (batch 20, 2500
# iterations validated every 500, 128 x 128) on the 5 folds of the 23 non-test cases, channels-last, in the precision
# that round 9 of ACDC chose; each run scored as soon as it has trained (amendment 2), on its fold's validation cases
# and, sealed, on the test cases. Run from a checkout at a fixed commit (a worktree ftp1, its parent folder
# RUNS_ROOT), one or two streams side by side:
#   AMP=False DATA=../shared/data OUT=docs/results/gate-fullsup_prostate bash docs/results/gate-fullsup_prostate/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint
# (every 50 iterations), a run not yet scored is scored.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/gate-fullsup_prostate}"
RUNS_ROOT="${RUNS_ROOT:-..}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
# shellcheck source=benchmarks/precision.sh
source "$(dirname "$0")/../../../benchmarks/precision.sh"
RECIPE="$(amp_recipe finetune_fullsup)"
job() { python -m benchmarks.finetune_curves --bundle gcl_prostate --base-split docs/results/cpu-mini_prostate/split.json \
    --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 --val-every 500 --checkpoint-every 50 \
    --fold "$1" --recipe "$RECIPE" -- --batch_size 20 --channels_last True --amp "$AMP"; }
score_job() {
    local split
    for split in val test; do
        python -m benchmarks.score_val score "$OUT" --bundle bundles/gcl_prostate --split "$split" \
            --run "f${1}_${RECIPE}_Lfull_d0_s0" --runs-root "$RUNS_ROOT" --data-dir "$DATA/prostate" \
            --scoring fullsup='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}' \
            --scoring nearest='{"pred_interp": "nearest"}'
    done
}
run_queue "${1:?usage: run.sh STREAM_NAME}" 5 >> "$OUT/stream_${1}.log" 2>&1
