# The jobs of a fine-tuning round on a GPU session, for benchmarks/gpu_queue.sh: sourced at the end of a round's
# gpu_jobs.sh (from the checkout's root), which sets first
#   plan              the round's folder: its validation rows (dice_val.csv) and the returned curves_gpu.csv and
#                     times_gpu.csv
#   prefix, suffix    one job a fold: the job of fold k is "${prefix}${k}${suffix}", its model's name in the round's
#                     models.csv
#   train             the driver's --out folder of fold k is $WORK/$train/f<k>
#   recipe iterations val_every
#   labels            (array) the driver's labelled set: (--labeled full) or (--labeled 2 --draw 0)
#   overrides         (array) the bundle's overrides of the round's command (after the driver's `--`)
#   val_scorings      (array) NAME=JSON: the scorings on the fold's validation patients
# and, where the round also scores the test patients (sealed, into a gate's folder),
#   gate              that folder (its dice_test.csv)
#   test_scorings     (array) NAME=JSON
# A round with several jobs a fold sets JOBS again after sourcing this file and redefines fold_of, train_dir and
# labels_of for its job names (folds holds (0) in a rehearsal). Each job: the round's command with the device
# switches of the GPU fine-tuning (the same batches' distribution drawn on the device, no setting of the recipe),
# then its model scored. REHEARSE=1: fold 0, 2 iterations validated once, on the CPU.
folds=(0 1 2 3 4) device=cuda
if [ "$REHEARSE" = 1 ]; then folds=(0) iterations=2 val_every=2 device=cpu; fi
gate="${gate:-}"
if [ -z "$gate" ]; then test_scorings=(); fi
JOBS=()
for fold in "${folds[@]}"; do JOBS+=("${prefix}${fold}${suffix}"); done

fold_of() {  # fold_of JOB: its fold
    local rest="${1#"$prefix"}"
    echo "${rest%"$suffix"}"
}

train_dir() { echo "$WORK/$train/f$(fold_of "$1")"; }  # train_dir JOB: the driver's --out folder of the job

labels_of() { printf '%s\n' "${labels[@]}"; }  # labels_of JOB: the driver's labelled set of the job, one word a line

score() {  # score SPLIT --model M ...: the scorings of those models on the split (val: the plan's, test: the gate's)
    local split="$1" folder="$plan" entry scorings=() listed=("${val_scorings[@]}")
    shift
    if [ "$split" = test ]; then
        folder="$gate"
        listed=("${test_scorings[@]}")
    fi
    for entry in "${listed[@]}"; do scorings+=(--scoring "$entry"); done
    OMP_NUM_THREADS=2 python3 -m benchmarks.score_val score "$folder" --split "$split" "$@" --runs-root "$WORK" \
        --data-dir "$DATA/acdc" "${scorings[@]}"
}

job_run() {
    local job_labels
    mapfile -t job_labels < <(labels_of "$1")
    OMP_NUM_THREADS=2 python3 -m benchmarks.finetune_curves --data-root "$DATA" --out "$(train_dir "$1")" \
        "${job_labels[@]}" --iterations "$iterations" --val-every "$val_every" --fold "$(fold_of "$1")" \
        --recipe "$recipe" -- "${overrides[@]}" --device "$device" --data_on_device True --batched_augmentation True \
        --decollate False --log_interval 25 || return 1
    score val --model "$1" || return 1
    if [ -n "$gate" ]; then score test --model "$1"; fi
}

has_rows() {  # has_rows FILE MODEL NAME=JSON ...: the file lists the model under every scoring (no Dice is read)
    local file="$1" model="$2" entry
    shift 2
    [ -f "$file" ] || return 1
    for entry in "$@"; do
        cut -d, -f1,2 "$file" | grep -qx "$model,${entry%%=*}" || return 1
    done
}

job_committed() {  # the job's rows are in the tracked files under every scoring
    has_rows "$plan/dice_val.csv" "$1" "${val_scorings[@]}" || return 1
    if [ -n "$gate" ]; then has_rows "$gate/dice_test.csv" "$1" "${test_scorings[@]}"; fi
}

job_pack() {
    local rows="$1" logs="$2" job train_dirs=() models=() dice=("$plan/dice_val.csv")
    shift 2
    for job in "$@"; do
        train_dirs+=("$(train_dir "$job")")
        models+=(--model "$job")
    done
    pack_training "$plan" "$rows" "$logs" "${train_dirs[@]}"
    # collected again from the evaluations on this machine: a later call's checkout has the committed Dice files
    score val "${models[@]}"
    if [ -n "$gate" ]; then
        score test "${models[@]}"
        dice+=("$gate/dice_test.csv")
    fi
    pack_scores "$rows" "$logs" "${dice[@]}"
}
