#!/usr/bin/env bash
# docs/protocol_prostate.md (protocol.md's "Secondary comparisons"): the probe Dice of every encoder of prostate's
# stage C on its 8 test cases (fitted on the 17 training cases), descriptively, after the registered analysis
# (benchmarks/probe_test.sh). Resumable. The rows go to cpu-protocol_prostate/probe_test. RECIPE: stage A's choice
# (amendment 2), for the command that makes missing encoders again.
#   JOBS=2 OMP_NUM_THREADS=1 bash docs/results/protocol_prostate/probe_test.sh [DATA_ROOT] [RESULTS_DIR] [EXPERIMENT]
RECIPE=${RECIPE:---pretrain-set epochs=60} exec bash benchmarks/probe_test.sh prostate "$@"
