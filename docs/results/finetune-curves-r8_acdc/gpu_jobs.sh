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

append() {  # append CSV TARGET: the rows of CSV, with its header only where TARGET is new
    if [ -f "$2" ]; then tail -n +2 "$1" >> "$2"; else cp "$1" "$2"; fi
}

job_pack() {
    local rows="$1" logs="$2" job fold scored=()
    shift 2
    mkdir -p "$rows/$plan" "$rows/$gate" "$logs/$plan"
    local file
    for file in curves_gpu.csv times_gpu.csv; do  # the committed rows (earlier sessions'), this session's added
        if [ -f "$plan/$file" ]; then cp "$plan/$file" "$rows/$plan/$file"; fi
    done
    for job in "$@"; do
        fold=$(fold_of "$job")
        python3 -m benchmarks.finetune_curves times "$WORK/train/f$fold"
        append "$WORK/train/f$fold/curves.csv" "$rows/$plan/curves_gpu.csv"
        append "$WORK/train/f$fold/times.csv" "$rows/$plan/times_gpu.csv"
        scored+=(--model "$job")
        (cd "$WORK" && cp --parents "train/f$fold"/runs/*/log.txt "train/f$fold"/runs/*/command.json "$logs/")
    done
    # collected again from the evaluations on this machine: a later call's checkout has the committed Dice files
    score "$plan" val "${scored[@]}"
    score "$gate" test "${scored[@]}"
    cp "$plan/dice_val.csv" "$rows/$plan/dice_val.csv"
    cp "$gate/dice_test.csv" "$rows/$gate/dice_test.csv"
    local evals=()
    mapfile -t evals < <(ls -d "$plan"/runs/*/eval.log "$gate"/runs/*/eval.log 2> /dev/null)
    if [ ${#evals[@]} -gt 0 ]; then cp --parents "${evals[@]}" "$logs/"; fi
}
