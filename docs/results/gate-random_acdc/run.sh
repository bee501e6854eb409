#!/usr/bin/env bash
# The ACDC random-initialisation gates (README.md here): the few-label recipe at L = 2, then L = 1, on the 5 folds,
# draws 0 and 1 (seed 0), in the width that round 10 chose. Run from a checkout at a fixed commit, one or two
# streams side by side:
#   WIDTH=default DATA=../shared/data OUT=docs/results/gate-random_acdc bash docs/results/gate-random_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/gate-random_acdc}"
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
# shellcheck source=benchmarks/width.sh
source "$(dirname "$0")/../../../benchmarks/width.sh"
features="$(width_features)"
recipe="$(width_recipe fewlabel)"
job() {  # job INDEX: 0-9 at L = 2, 10-19 at L = 1; fold INDEX % 10 / 2, draw INDEX % 2
    local labeled=$((2 - $1 / 10)) fold=$(($1 % 10 / 2)) draw=$(($1 % 2))
    python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled "$labeled" --draw "$draw" \
        --iterations 1500 --val-every 250 --fold "$fold" --recipe "$recipe" -- --batch_size 20 \
        --features "$features" --channels_last True --amp False
}
run_queue "${1:?usage: run.sh STREAM_NAME}" 20 >> "$OUT/stream_${1}.log" 2>&1
