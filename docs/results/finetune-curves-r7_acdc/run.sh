#!/usr/bin/env bash
# Round 7 of the fine-tuning learning curves (README.md here): L = 2, random initialisation, batch 8 against batch 20
# on the 5 folds. Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r7_acdc bash docs/results/finetune-curves-r7_acdc/run.sh [A|B]
# Resumable: finished runs are skipped, an interrupted one continues from its last checkpoint. One thread per stream;
# stream A runs the folds 0, 1, 2, stream B the folds 4, 3 (no fold in both), both arms of a fold one after the other.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r7_acdc}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled 2 --draw 0 \
    --iterations 1500 --val-every 250 "$@"; }
fold_pair() {
    curve --fold "$1" --recipe defaults
    curve --fold "$1" --recipe batch20 -- --batch_size 20
}
case "${1:-A}" in
    A) for fold in 0 1 2; do fold_pair "$fold"; done >> "$OUT/stream_a.log" 2>&1 ;;
    B) for fold in 4 3; do fold_pair "$fold"; done >> "$OUT/stream_b.log" 2>&1 ;;
    *) echo "usage: run.sh [A|B]" >&2; exit 2 ;;
esac
