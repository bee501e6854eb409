#!/usr/bin/env bash
# The gate-fullsup_prostate reading (amendment 3), run once after all 5 models are scored.
set -euo pipefail
P=docs/results/gate-fullsup_prostate
echo "== gate (primary): set fullsup, fullsup, test, threshold 0.70"
python -m benchmarks.score_val level $P --set fullsup --scoring fullsup --split test --threshold 0.70
for key in dice_pooled_2d transition_zone peripheral_zone; do
  echo "== --key $key (test)"
  python -m benchmarks.score_val level $P --set fullsup --scoring fullsup --split test --key $key
done
echo "== --scoring nearest (test)"
python -m benchmarks.score_val level $P --set fullsup --scoring nearest --split test
echo "== --split val"
python -m benchmarks.score_val level $P --set fullsup --scoring fullsup --split val
