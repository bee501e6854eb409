#!/usr/bin/env bash
# Round 1 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves_acdc bash docs/results/finetune-curves_acdc/run.sh
# Resumable: finished runs are skipped. Two streams, one thread each.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves_acdc}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" "$@"; }
(
    curve --fold 0 --labeled full --recipe defaults --iterations 4000 --val-every 500
    curve --fold 0 --labeled full --recipe elastic --iterations 4000 --val-every 500 -- --elastic_prob 0.5
) > "$OUT/stream_a.log" 2>&1 &
(
    for draw in 0 1; do
        curve --fold 0 --labeled 2 --draw "$draw" --recipe defaults --iterations 2000 --val-every 250
        curve --fold 0 --labeled 2 --draw "$draw" --recipe elastic --iterations 2000 --val-every 250 -- --elastic_prob 0.5
    done
) > "$OUT/stream_b.log" 2>&1 &
wait
