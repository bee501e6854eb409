# Round 10's jobs on a GPU session (amendment 2), for benchmarks/gpu_queue.sh (round 8's finished on the CPU):
#   source benchmarks/offline_setup.sh && bash benchmarks/gpu_queue.sh 480 docs/results/finetune-width-r10_acdc/gpu_jobs.sh
# One job per fold: round 10's command (AMP=False, amendment 1) with the device switches of the GPU fine-tuning
# (recipe batch20_width512_gpu), then its model scored on the fold's validation patients (`bilinear`, one pass).
# Returned: this folder's dice_val.csv, curves_gpu.csv and times_gpu.csv. REHEARSE=1: fold 0, 2 iterations
# validated once, on the CPU.
plan=docs/results/finetune-width-r10_acdc
folds=(0 1 2 3 4) iterations=1500 val_every=250 device=cuda
if [ "$REHEARSE" = 1 ]; then folds=(0) iterations=2 val_every=2 device=cpu; fi
JOBS=()
for fold in "${folds[@]}"; do JOBS+=("r10g_f${fold}_batch20_width512_L2_d0"); done

fold_of() {  # fold_of JOB: its fold
    local rest="${1#r10g_f}"
    echo "${rest%%_*}"
}

score() {  # score --model M ...: the plan's scoring of those models on their folds' validation patients
    OMP_NUM_THREADS=2 python3 -m benchmarks.score_val score "$plan" --split val "$@" --runs-root "$WORK" \
        --data-dir "$DATA/acdc" --scoring 'bilinear={"pred_interp": "bilinear"}'
}

job_run() {
    local fold
    fold=$(fold_of "$1")
    OMP_NUM_THREADS=2 python3 -m benchmarks.finetune_curves --data-root "$DATA" --out "$WORK/train-r10/f$fold" \
        --labeled 2 --draw 0 --iterations "$iterations" --val-every "$val_every" --fold "$fold" \
        --recipe batch20_width512_gpu -- --batch_size 20 --features "[32,64,128,256,512,32]" --channels_last True \
        --amp False --device "$device" --data_on_device True --batched_augmentation True --decollate False \
        --log_interval 25 || return 1
    score --model "$1"
}

job_committed() {  # the model's row under the plan's scoring is in the tracked file (no Dice is read)
    [ -f "$plan/dice_val.csv" ] && cut -d, -f1,2 "$plan/dice_val.csv" | grep -qx "$1,bilinear"
}

job_pack() {
    local rows="$1" logs="$2" job train=() models=()
    shift 2
    for job in "$@"; do
        train+=("$WORK/train-r10/f$(fold_of "$job")")
        models+=(--model "$job")
    done
    pack_training "$plan" "$rows" "$logs" "${train[@]}"
    score "${models[@]}"  # collected again from the evaluations on this machine
    pack_scores "$rows" "$logs" "$plan/dice_val.csv"
}
