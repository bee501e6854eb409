#!/usr/bin/env bash
# Round 2 of the fine-tuning learning curves (README.md here). Run from a checkout at a fixed commit:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r2_acdc bash docs/results/finetune-curves-r2_acdc/run.sh
# Resumable: finished runs are skipped. Two streams, one thread each.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r2_acdc}"
export OMP_NUM_THREADS=1
NATIVE=(--grid native --image_size "[176,176]" --fov_scale 1.0)
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" "$@"; }
(
    curve --fold 0 --labeled full --recipe native176 --iterations 4000 --val-every 500 -- "${NATIVE[@]}"
) > "$OUT/stream_a.log" 2>&1 &
(
    for draw in 0 1; do
        curve --fold 0 --labeled 2 --draw "$draw" --recipe native176 --iterations 2000 --val-every 250 -- "${NATIVE[@]}"
    done
) > "$OUT/stream_b.log" 2>&1 &
wait
