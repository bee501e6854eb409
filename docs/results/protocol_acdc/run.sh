#!/usr/bin/env bash
# docs/protocol.md, stages B and C on ACDC as amended, then the assembled experiment and its registered analysis
# (benchmarks/protocol_run.sh with the cpu-protocol preset). Resumable: rerun the same command.
#   RECIPE=default JOBS=2 bash docs/results/protocol_acdc/run.sh [DATA_ROOT] [RESULTS_DIR]   (from the repository's root)
exec bash benchmarks/protocol_run.sh acdc cpu-protocol "$@"
