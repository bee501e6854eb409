#!/usr/bin/env bash
# Round 5 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r5_acdc bash docs/results/finetune-curves-r5_acdc/run.sh [A|B]
# Resumable: finished runs are skipped (an interrupted run starts again). One thread per stream; no argument runs both.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r5_acdc}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --fold 0 --labeled full "$@"; }
stream_a() { curve --recipe batch20 --iterations 2500 --val-every 500 -- --batch_size 20 > "$OUT/stream_a.log" 2>&1; }
stream_b() { curve --recipe defaults --iterations 6000 --val-every 500 > "$OUT/stream_b.log" 2>&1; }
case "${1:-both}" in
    A) stream_a ;;
    B) stream_b ;;
    both) stream_a & stream_b & wait ;;
    *) echo "usage: run.sh [A|B]" >&2; exit 2 ;;
esac
