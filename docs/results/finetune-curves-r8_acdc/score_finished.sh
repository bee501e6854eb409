#!/usr/bin/env bash
# Round 8, amendment 3: each fold's model scored in the session that trains it, as soon as its run has finished,
# before the machine that holds it goes: on its fold's validation patients under the plan's three scorings (rows
# into this folder's dice_val.csv) and, sealed, on the test patients under the gate's two scorings (rows into
# ../gate-fullsup_acdc/dice_test.csv, read only as that plan's amendment 1 says). No Dice is printed: score_val
# prints the file it wrote. Run from a checkout at the commit that adds this file, beside the training worktree:
#   TRAIN=../ft53r8 RUNS_ROOT=.. DATA=../shared/data bash docs/results/finetune-curves-r8_acdc/score_finished.sh
# It polls every minute until all 5 folds are scored; a fold with `scored` in its claim is not scored again, and an
# interrupted scoring resumes (score_val skips what has a dice.json).
set -euo pipefail
TRAIN="${TRAIN:?the training checkout (its docs/results/finetune-curves-r8_acdc/runs/claims)}"
RUNS_ROOT="${RUNS_ROOT:?the folder that models.csv run_dir is relative to}"
DATA="${DATA:-../shared/data}"
export OMP_NUM_THREADS=1
here=docs/results/finetune-curves-r8_acdc
claims="$TRAIN/$here/runs/claims"
fullsup='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
score() {  # score PLAN SPLIT MODEL NAME=JSON ...
    local plan="$1" split="$2" model="$3"; shift 3
    local args=(); for s in "$@"; do args+=(--scoring "$s"); done
    python -m benchmarks.score_val score "$plan" --split "$split" --model "$model" --runs-root "$RUNS_ROOT" \
        --data-dir "$DATA/acdc" "${args[@]}"
}
while true; do
    left=0
    for fold in 0 1 2 3 4; do
        if [ -f "$claims/f$fold/scored" ]; then continue; fi
        left=1
        if [ ! -f "$claims/f$fold/done" ]; then continue; fi
        model="r8_f${fold}_batch20_grid192"
        echo "fold $fold: scoring $model ($(date -u +%FT%TZ))"
        score "$here" val "$model" "fullsup=$fullsup" 'bilinear={"pred_interp": "bilinear"}' \
            'nearest={"pred_interp": "nearest"}'
        score docs/results/gate-fullsup_acdc test "$model" "fullsup=$fullsup" 'nearest={"pred_interp": "nearest"}'
        touch "$claims/f$fold/scored"
        echo "fold $fold: scored ($(date -u +%FT%TZ))"
    done
    if [ "$left" = 0 ]; then break; fi
    sleep 60
done
