#!/usr/bin/env bash
# The jobs of a random-initialisation gate (sourced by docs/results/gate-random_{acdc,prostate}/run.sh after
# benchmarks/queue.sh and benchmarks/width.sh, with DATA, OUT, RUNS_ROOT, DATASET (the folder under DATA) and the
# arrays DRIVER_ARGS (the dataset's arguments of benchmarks/finetune_curves.py) and SCORE_ARGS (of
# benchmarks/score_val.py) set): 20 runs of the few-label recipe at round 10's width, L = 2 first. Each run is scored
# as soon as it has trained (the plans' amendment 1), on its fold's validation patients and, sealed, on the test
# patients: score_val prints only the file it wrote.
features="$(width_features)"
recipe="$(width_recipe fewlabel)"
gate_run() {  # gate_run INDEX: labeled (2 for 0-9, 1 for 10-19), fold (INDEX % 10 / 2), draw (INDEX % 2), folder
    labeled=$((2 - $1 / 10)) fold=$(($1 % 10 / 2)) draw=$(($1 % 2))
    folder="f${fold}_${recipe}_L${labeled}_d${draw}_s0"  # the run folder that benchmarks/finetune_curves.py makes
}
job() {
    local labeled fold draw folder
    gate_run "$1"
    python -m benchmarks.finetune_curves "${DRIVER_ARGS[@]}" --data-root "$DATA" --out "$OUT" --labeled "$labeled" \
        --draw "$draw" --iterations 1500 --val-every 250 --checkpoint-every 50 --fold "$fold" --recipe "$recipe" \
        -- --batch_size 20 --features "$features" --channels_last True --amp False
}
score_job() {
    local labeled fold draw folder split
    gate_run "$1"
    for split in val test; do
        python -m benchmarks.score_val score "$OUT" "${SCORE_ARGS[@]}" --split "$split" --run "$folder" \
            --runs-root "$RUNS_ROOT" --data-dir "$DATA/$DATASET" --scoring bilinear='{"pred_interp": "bilinear"}'
    done
}
