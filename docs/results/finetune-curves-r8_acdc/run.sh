#!/usr/bin/env bash
# Round 8 of the fine-tuning learning curves (README.md here): full supervision at batch 20 on the 192 x 192 grid,
# folds 1-4. Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r8_acdc bash docs/results/finetune-curves-r8_acdc/run.sh [A|B]
# Resumable: finished runs are skipped, an interrupted one continues from its last checkpoint. One thread per stream;
# stream A runs the folds 1, 3, stream B the folds 2, 4.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r8_acdc}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 \
    --val-every 500 --fold "$1" --recipe batch20_grid192 -- --batch_size 20 --image_size "[192,192]"; }
case "${1:-A}" in
    A) for fold in 1 3; do curve "$fold"; done >> "$OUT/stream_a.log" 2>&1 ;;
    B) for fold in 2 4; do curve "$fold"; done >> "$OUT/stream_b.log" 2>&1 ;;
    *) echo "usage: run.sh [A|B]" >&2; exit 2 ;;
esac
