#!/usr/bin/env bash
# Round 8 of the fine-tuning learning curves (README.md here): full supervision at batch 20 on the 192 x 192 grid,
# folds 0-4 (amendment 1: fold 0 again, its round-6 model lost with the machine; amendment 2: channels-last). Run
# from a checkout at a fixed commit, one or two streams side by side:
#   DATA=../shared/data OUT=docs/results/finetune-curves-r8_acdc bash docs/results/finetune-curves-r8_acdc/run.sh NAME
# Each stream takes the next fold that is neither finished nor claimed by a live stream (a claim is a folder under
# $OUT/runs/claims holding the stream's process id; a dead stream's claim is taken over). Resumable: finished runs are
# skipped, an interrupted one continues from its last checkpoint (every 50 iterations: amendment 5). One thread per
# stream.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r8_acdc}"
NAME="${1:?usage: run.sh STREAM_NAME}"
export OMP_NUM_THREADS=1
curve() { python -m benchmarks.finetune_curves --data-root "$DATA" --out "$OUT" --labeled full --iterations 2500 \
    --val-every 500 --checkpoint-every 50 --fold "$1" --recipe batch20_grid192 -- --batch_size 20 --image_size "[192,192]" \
    --channels_last True; }
claim() {  # claim() FOLD: succeeds when this stream holds the fold's claim
    local dir="$OUT/runs/claims/f$1"
    mkdir -p "$OUT/runs/claims"
    if mkdir "$dir" 2>/dev/null; then echo $$ > "$dir/pid"; return 0; fi
    local owner; owner=$(cat "$dir/pid" 2>/dev/null || true)
    if [ -n "$owner" ] && kill -0 "$owner" 2>/dev/null; then return 1; fi
    echo $$ > "$dir/pid"  # the owner is gone: take the claim over
}
for fold in 0 1 2 3 4; do
    if [ -f "$OUT/runs/claims/f$fold/done" ]; then continue; fi
    claim "$fold" || continue
    echo "stream $NAME: fold $fold ($(date -u +%FT%TZ))"
    curve "$fold"
    touch "$OUT/runs/claims/f$fold/done"
done >> "$OUT/stream_$NAME.log" 2>&1
