#!/usr/bin/env bash
# The ACDC random-initialisation gates (README.md here): the few-label recipe at L = 2, then L = 1, on the 5 folds,
# draws 0 and 1 (seed 0), in the width that round 10 chose, each run scored as it ends (amendment 1). Run from a
# checkout at a fixed commit (a worktree ftg1, its parent folder RUNS_ROOT), one or two
# streams side by side:
#   WIDTH=default DATA=../shared/data OUT=docs/results/gate-random_acdc bash docs/results/gate-random_acdc/run.sh NAME
# Resumable (benchmarks/queue.sh): finished runs are skipped, an interrupted one continues from its last checkpoint
# (every 50 iterations), a run not yet scored is scored.
set -euo pipefail
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/gate-random_acdc}"
RUNS_ROOT="${RUNS_ROOT:-..}"
DATASET=acdc
DRIVER_ARGS=()
SCORE_ARGS=()
export OMP_NUM_THREADS=1
# shellcheck source=benchmarks/queue.sh
source "$(dirname "$0")/../../../benchmarks/queue.sh"
# shellcheck source=benchmarks/width.sh
source "$(dirname "$0")/../../../benchmarks/width.sh"
# shellcheck source=benchmarks/gate_random.sh
source "$(dirname "$0")/../../../benchmarks/gate_random.sh"
run_queue "${1:?usage: run.sh STREAM_NAME}" 20 >> "$OUT/stream_${1}.log" 2>&1
