#!/usr/bin/env bash
# docs/protocol.md, "Secondary comparisons": the probe Dice of every encoder of ACDC's stage C on its 20 test patients
# (fitted on the 48 training patients), descriptively, after the registered analysis (benchmarks/probe_test.sh).
# Resumable. The rows go to cpu-protocol_acdc/probe_test.
#   JOBS=2 OMP_NUM_THREADS=1 bash docs/results/protocol_acdc/probe_test.sh [DATA_ROOT] [RESULTS_DIR] [EXPERIMENT]
RECIPE=${RECIPE:-default} exec bash benchmarks/probe_test.sh acdc "$@"
