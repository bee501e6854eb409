# Round 8's jobs on a GPU session (amendments 4 and 6), for benchmarks/gpu_queue.sh:
#   source benchmarks/offline_setup.sh && bash benchmarks/gpu_queue.sh 480 docs/results/finetune-curves-r8_acdc/gpu_jobs.sh
# One job per fold of the 192 x 192 arm: round 8's command with the device switches of the GPU fine-tuning (recipe
# batch20_grid192_gpu), then its model scored on the fold's validation patients under the plan's three scorings and,
# sealed, on the test patients under the gate's two. Returned: this folder's dice_val.csv, curves_gpu.csv and
# times_gpu.csv, the gate's dice_test.csv. REHEARSE=1: fold 0, 2 iterations validated once, on the CPU.
plan=docs/results/finetune-curves-r8_acdc
gate=docs/results/gate-fullsup_acdc
fullsup='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
folds=(0 1 2 3 4) iterations=2500 val_every=500 device=cuda
if [ "$REHEARSE" = 1 ]; then folds=(0) iterations=2 val_every=2 device=cpu; fi
JOBS=()
for fold in "${folds[@]}"; do JOBS+=("r8g_f${fold}_batch20_grid192"); done

fold_of() {  # fold_of JOB: its fold
    local rest="${1#r8g_f}"
    echo "${rest%%_*}"
}

score() {  # score PLAN SPLIT --model M ...: the plan's scorings (validation) or the gate's (test) of those models
    local plan_dir="$1" split="$2"
    shift 2
    local scorings=(--scoring "fullsup=$fullsup" --scoring 'nearest={"pred_interp": "nearest"}')
    if [ "$split" = val ]; then scorings+=(--scoring 'bilinear={"pred_interp": "bilinear"}'); fi
    OMP_NUM_THREADS=2 python3 -m benchmarks.score_val score "$plan_dir" --split "$split" "$@" --runs-root "$WORK" \
        --data-dir "$DATA/acdc" "${scorings[@]}"
}

job_run() {
    local fold
    fold=$(fold_of "$1")
    OMP_NUM_THREADS=2 python3 -m benchmarks.finetune_curves --data-root "$DATA" --out "$WORK/train/f$fold" \
        --labeled full --iterations "$iterations" --val-every "$val_every" --fold "$fold" --recipe batch20_grid192_gpu \
        -- --batch_size 20 --image_size "[192,192]" --channels_last True --device "$device" --data_on_device True \
        --batched_augmentation True --decollate False --log_interval 25 || return 1
    score "$plan" val --model "$1" || return 1
    score "$gate" test --model "$1"
}

has_rows() {  # has_rows FILE MODEL SCORING ...: the file lists the model under every scoring (no Dice is read)
    local file="$1" model="$2"
    shift 2
    [ -f "$file" ] || return 1
    local scoring
    for scoring in "$@"; do
        cut -d, -f1,2 "$file" | grep -qx "$model,$scoring" || return 1
    done
}

job_committed() {
    has_rows "$plan/dice_val.csv" "$1" fullsup bilinear nearest && has_rows "$gate/dice_test.csv" "$1" fullsup nearest
}

job_pack() {
    local rows="$1" logs="$2" job train=() models=()
    shift 2
    for job in "$@"; do
        train+=("$WORK/train/f$(fold_of "$job")")
        models+=(--model "$job")
    done
    pack_training "$plan" "$rows" "$logs" "${train[@]}"
    # collected again from the evaluations on this machine: a later call's checkout has the committed Dice files
    score "$plan" val "${models[@]}"
    score "$gate" test "${models[@]}"
    pack_scores "$rows" "$logs" "$plan/dice_val.csv" "$gate/dice_test.csv"
}
