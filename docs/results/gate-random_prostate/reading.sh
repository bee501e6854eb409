#!/usr/bin/env bash
# The gate-random_prostate reading (amendment 2), run once after all 20 models are scored. The zone columns carry the
# names of f606f15, swapped (docs/results/README.md, "Zone names"): transition_zone is label 1, the peripheral zone.
set -euo pipefail
P=docs/results/gate-random_prostate
for spec in "L1 0.477" "L2 0.547"; do
  set -- $spec
  echo "== gate (primary): set $1, bilinear, test, threshold $2, cluster fold"
  python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split test --threshold $2 --cluster fold
  for key in dice_pooled_2d transition_zone peripheral_zone; do
    echo "== set $1, --key $key (test)"
    python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split test --key $key --cluster fold
  done
  echo "== set $1, --split val"
  python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split val --cluster fold
done
