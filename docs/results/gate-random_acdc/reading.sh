#!/usr/bin/env bash
# The gate-random_acdc reading (amendment 2), run once after all 20 models are scored.
set -euo pipefail
P=docs/results/gate-random_acdc
for spec in "L1 0.60" "L2 0.68"; do
  set -- $spec
  echo "== gate (primary): set $1, bilinear, test, threshold $2, cluster fold"
  python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split test --threshold $2 --cluster fold
  for key in dice_ed dice_pooled_2d rv myocardium lv; do
    echo "== set $1, --key $key (test)"
    python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split test --key $key --cluster fold
  done
  echo "== set $1, --split val"
  python -m benchmarks.score_val level $P --set $1 --scoring bilinear --split val --cluster fold
done
