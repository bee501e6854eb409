#!/usr/bin/env bash
# docs/protocol_prostate.md, stages B and C on prostate (benchmarks/protocol_run.sh with the cpu-protocol-prostate
# preset), after its stage A: RECIPE carries the length and recipe that stage A chose (its amendment). Resumable.
#   RECIPE="--pretrain-set epochs=N" JOBS=2 bash docs/results/protocol_prostate/run.sh [DATA_ROOT] [RESULTS_DIR]
exec bash benchmarks/protocol_run.sh prostate cpu-protocol-prostate "$@"
