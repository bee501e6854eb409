#!/usr/bin/env bash
# Round 4 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r4_acdc bash docs/results/finetune-curves-r4_acdc/run.sh
# Resumable: finished runs are skipped (an interrupted run starts again). One thread, one run at a time.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r4_acdc}"
export OMP_NUM_THREADS=1
for fold in 1 2 3 4; do
    python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --fold "$fold" --labeled full \
        --recipe defaults --iterations 2500 --val-every 500
done >> "$OUT/stream.log" 2>&1
