# The ACDC random-initialisation gates' jobs on a GPU session (amendment 4), for benchmarks/gpu_queue.sh, after
# round 11's (docs/gpu_run.md, step 9). 20 jobs in the CPU set's order (L = 2 first; benchmarks/gate_random.sh):
# the plan's command (WIDTH=default, amendment 3) with the device switches of the GPU fine-tuning (recipe
# fewlabel_gpu), then its model scored on its fold's validation patients into dice_val.csv and, sealed, on the test
# patients into dice_test.csv (`bilinear`, one pass). Returned: this folder's dice_val.csv, dice_test.csv,
# curves_gpu.csv and times_gpu.csv. REHEARSE=1: the first job, 2 iterations validated once, on the CPU.
plan=docs/results/gate-random_acdc
gate=$plan
prefix=rgg_ suffix= train=train-rg recipe=fewlabel_gpu iterations=1500 val_every=250
labels=()
overrides=(--batch_size 20 --features "[16,32,64,128,256,16]" --channels_last True --amp False)
val_scorings=('bilinear={"pred_interp": "bilinear"}')
test_scorings=("${val_scorings[@]}")
# shellcheck source=benchmarks/gpu_finetune_jobs.sh
source benchmarks/gpu_finetune_jobs.sh
JOBS=()  # job i: L = 2 for i < 10, else 1; fold i % 10 / 2; draw i % 2 (the CPU set's models, prefix rgg_)
for i in $(seq 0 $((${#folds[@]} == 1 ? 0 : 19))); do
    JOBS+=("rgg_f$((i % 10 / 2))_fewlabel_L$((2 - i / 10))_d$((i % 2))")
done

fold_of() {  # fold_of rgg_f<k>_fewlabel_L<L>_d<d>: k
    local rest="${1#rgg_f}"
    echo "${rest%%_*}"
}

train_dir() { echo "$WORK/$train/${1#rgg_}"; }  # one driver --out folder a job

labels_of() {  # --labeled L --draw d, from the job's name
    local draw="${1##*_d}" rest="${1%_d*}"
    printf '%s\n' --labeled "${rest##*_L}" --draw "$draw"
}
