#!/usr/bin/env bash
# Round 8 on a time-limited GPU session (amendment 4): the 5 folds of the 192 x 192 arm at once on one GPU, each
# scored as soon as it has finished (validation under the plan's three scorings; sealed, the test patients under
# the gate's two), then the rows packed into $OUT. On the GPU machine, from the checkout's root (carry .offline):
#   source benchmarks/offline_setup.sh && bash docs/results/finetune-curves-r8_acdc/gpu.sh 480
# Each call starts the folds not started (in a new session: they run on between calls while the machine is held),
# waits until all are scored or SECONDS have passed, packs what is done, and exits 0 when all 5 are scored, 2 when
# work is left (call again at once: a machine that goes back takes the unfinished folds with it; a failed fold, its
# log in logs.tar.gz, is started again by the next call and resumes from its last checkpoint). Nothing it
# prints holds a Dice: the drivers' and the scorings' output go to logs.tar.gz.
# A fold whose rows are in the tracked Dice files (scored in an earlier GPU session) is not run again.
# REHEARSE=1 (on this CPU): fold 0 only, 2 iterations validated once, the device `cpu`.
set -euo pipefail
WAIT="${1:?usage: gpu.sh SECONDS}"
OUT="${OUT:?the folder whose files come back}"
DATA="${GCL_DATA_ROOT:?source benchmarks/offline_setup.sh first (it sets GCL_DATA_ROOT)}"
WORK="${WORK:-/tmp/r8-gpu}"
plan=docs/results/finetune-curves-r8_acdc
gate=docs/results/gate-fullsup_acdc
fullsup='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
folds="0 1 2 3 4" iterations=2500 val_every=500 device=cuda
if [ "${REHEARSE:-0}" = 1 ]; then folds="0" iterations=2 val_every=2 device=cpu; fi
mkdir -p "$WORK/jobs" "$OUT"

fold_job() {  # fold_job FOLD: train (resumable), then score on validation and, sealed, on the test patients; each
    # step only after the one before succeeded (the job runs in a `||` list, where `set -e` does not act)
    local fold="$1" model="r8g_f$1_batch20_grid192"
    OMP_NUM_THREADS=2 python3 -m benchmarks.finetune_curves --data-root "$DATA" --out "$WORK/train/f$fold" \
        --labeled full --iterations "$iterations" --val-every "$val_every" --fold "$fold" --recipe batch20_grid192_gpu \
        -- --batch_size 20 --image_size "[192,192]" --channels_last True --device "$device" --data_on_device True \
        --batched_augmentation True --decollate False --log_interval 25 || return 1
    score "$plan" val --model "$model" || return 1
    score "$gate" test --model "$model" || return 1
    touch "$WORK/jobs/f$fold.scored"
}

score() {  # score PLAN SPLIT --model M ...: the plan's scorings (validation) or the gate's (test) of those models
    local plan_dir="$1" split="$2"; shift 2
    local scorings=(--scoring "fullsup=$fullsup" --scoring 'nearest={"pred_interp": "nearest"}')
    if [ "$split" = val ]; then scorings+=(--scoring 'bilinear={"pred_interp": "bilinear"}'); fi
    OMP_NUM_THREADS=2 python3 -m benchmarks.score_val score "$plan_dir" --split "$split" "$@" --runs-root "$WORK" \
        --data-dir "$DATA/acdc" "${scorings[@]}"
}

append() {  # append CSV TARGET: the rows of CSV, with its header only where TARGET is new
    if [ -f "$2" ]; then tail -n +2 "$1" >> "$2"; else cp "$1" "$2"; fi
}

pack() {  # the rows (curves and times of the GPU folds, the plan's and the gate's Dice) and the logs into $OUT
    rm -f "$OUT/curves_gpu.csv" "$OUT/times_gpu.csv"
    local dir
    for dir in "$WORK"/train/f*; do
        [ -f "$dir/curves.csv" ] || continue
        python3 -m benchmarks.finetune_curves times "$dir" > /dev/null
        append "$dir/curves.csv" "$OUT/curves_gpu.csv"
        append "$dir/times.csv" "$OUT/times_gpu.csv"
    done
    # collected again from the scored folds' evaluations: a later call's checkout replaces the tracked Dice files
    local scored=() fold
    for fold in $folds; do  # this session's (an earlier session's rows are kept by the collection)
        if [ -f "$WORK/jobs/f$fold.scored" ] && [ ! -f "$WORK/jobs/f$fold.earlier" ]; then
            scored+=(--model "r8g_f${fold}_batch20_grid192")
        fi
    done
    if [ ${#scored[@]} -gt 0 ]; then
        score "$plan" val "${scored[@]}" > /dev/null
        score "$gate" test "${scored[@]}" > /dev/null
        cp "$plan/dice_val.csv" "$OUT/$(basename "$plan")_dice_val.csv"
        cp "$gate/dice_test.csv" "$OUT/$(basename "$gate")_dice_test.csv"
    fi
    local runs=() evals=()
    mapfile -t runs < <(cd "$WORK" && ls -d train/f*/runs/*/log.txt 2>/dev/null)
    mapfile -t evals < <(ls -d "$plan"/runs/*/eval.log "$gate"/runs/*/eval.log 2>/dev/null)
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" jobs "${runs[@]}" ${evals[@]+-C "$PWD" "${evals[@]}"}
}

has_rows() {  # has_rows FILE MODEL SCORING ...: the file lists the model under every scoring (no Dice is read)
    local file="$1" model="$2"; shift 2
    [ -f "$file" ] || return 1
    local scoring; for scoring in "$@"; do
        cut -d, -f1,2 "$file" | grep -qx "$model,$scoring" || return 1
    done
}

for fold in $folds; do  # a fold scored in an earlier session (its rows committed) is not run again
    model="r8g_f${fold}_batch20_grid192"
    if [ ! -f "$WORK/jobs/f$fold.started" ] && has_rows "$plan/dice_val.csv" "$model" fullsup bilinear nearest &&
        has_rows "$gate/dice_test.csv" "$model" fullsup nearest; then
        touch "$WORK/jobs/f$fold.started" "$WORK/jobs/f$fold.earlier" "$WORK/jobs/f$fold.scored"
        echo "fold $fold: scored in an earlier session"
    fi
done
for fold in $folds; do  # a fold not started, or whose job failed (it resumes from its last checkpoint)
    if [ ! -f "$WORK/jobs/f$fold.started" ] || [ -f "$WORK/jobs/f$fold.failed" ]; then
        rm -f "$WORK/jobs/f$fold.failed"
        touch "$WORK/jobs/f$fold.started"
        setsid bash -c "$(declare -f fold_job score); $(declare -p plan gate fullsup iterations val_every device DATA WORK);
            fold_job $fold || touch $WORK/jobs/f$fold.failed" >> "$WORK/jobs/f$fold.log" 2>&1 < /dev/null &
        echo "fold $fold: started ($(date -u +%FT%TZ))"
    fi
done
deadline=$((SECONDS + WAIT))
state() { if [ -f "$WORK/jobs/f$1.scored" ]; then echo scored; elif [ -f "$WORK/jobs/f$1.failed" ]; then echo failed;
    else echo running; fi; }
running() { local n=0 fold; for fold in $folds; do [ "$(state "$fold")" = running ] && n=$((n + 1)); done; echo $n; }
while [ "$(running)" -gt 0 ] && [ $SECONDS -lt $deadline ]; do sleep 2; done
pack
for fold in $folds; do echo "fold $fold: $(state "$fold")"; done
left() { local n=0 fold; for fold in $folds; do [ -f "$WORK/jobs/f$fold.scored" ] || n=$((n + 1)); done; echo $n; }
ls -l "$OUT"
[ "$(left)" -eq 0 ] || exit 2
