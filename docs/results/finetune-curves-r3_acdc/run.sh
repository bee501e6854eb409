#!/usr/bin/env bash
# Round 3 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r3_acdc bash docs/results/finetune-curves-r3_acdc/run.sh
# Resumable: finished runs are skipped. Two streams, one thread each.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r3_acdc}"
export OMP_NUM_THREADS=1
PAPER_WIDTH=(--features "[32,64,128,256,512,32]")
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" "$@"; }
(
    curve --fold 0 --labeled full --recipe width512 --iterations 2500 --val-every 500 -- "${PAPER_WIDTH[@]}"
) > "$OUT/stream_a.log" 2>&1 &
(
    curve --fold 0 --labeled full --recipe defaults --iterations 2500 --val-every 500
    curve --fold 0 --labeled 2 --draw 0 --recipe width512 --iterations 2000 --val-every 250 -- "${PAPER_WIDTH[@]}"
) > "$OUT/stream_b.log" 2>&1 &
wait
