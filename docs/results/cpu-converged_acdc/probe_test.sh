#!/usr/bin/env bash
# docs/protocol_converged.md, "Reported beside it, not tested": the probe Dice of every encoder of amendment 4's run
# (cpu-converged_acdc: GCL, SimCLR and the positive control, pre-training seeds 0-2, and random encoders of seeds 0-2)
# on its 20 test patients, fitted on its training patients, descriptively, after the registered analysis
# (benchmarks/probe_test.sh). Resumable. The rows go to RESULTS_DIR/cpu-converged_acdc/probe_test; encoders missing on
# this machine come back from their cards with the records (python -m experiments restore ... --encoders, into a
# folder set aside first: restore fills only an empty one).
#   JOBS=2 OMP_NUM_THREADS=1 bash docs/results/cpu-converged_acdc/probe_test.sh [DATA_ROOT] [RESULTS_DIR]
ROOT=${1:-../shared/data}
RESULTS=${2:-results}
KEPT=docs/results/cpu-converged_acdc
PROBE_OUT=$RESULTS/cpu-converged_acdc/probe_test \
  BRING_BACK="mv $RESULTS/cpu-converged_acdc $RESULTS/cpu-converged_acdc.records-only \
&& python -m experiments restore $KEPT/kept/cpu-converged_acdc.tar.xz $RESULTS/cpu-converged_acdc \
--encoders $KEPT/encoders (restore fills only an empty folder)" \
  exec bash benchmarks/probe_test.sh acdc "$ROOT" "$RESULTS" cpu-converged_acdc
