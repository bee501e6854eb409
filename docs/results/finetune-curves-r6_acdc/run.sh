#!/usr/bin/env bash
# Round 6 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r6_acdc bash docs/results/finetune-curves-r6_acdc/run.sh [A|B]
# Resumable: finished runs are skipped, an interrupted one continues from its last checkpoint. One thread per stream;
# no argument runs both.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r6_acdc}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 \
    --val-every 500 "$@"; }
stream_a() {
    for fold in 1 2 3 4; do
        curve --fold "$fold" --recipe batch20 -- --batch_size 20
    done >> "$OUT/stream_a.log" 2>&1
}
stream_b() {
    curve --fold 0 --recipe batch20_grid192 -- --batch_size 20 --image_size "[192,192]" >> "$OUT/stream_b.log" 2>&1
}
case "${1:-both}" in
    A) stream_a ;;
    B) stream_b ;;
    both) stream_a & stream_b & wait ;;
    *) echo "usage: run.sh [A|B]" >&2; exit 2 ;;
esac
