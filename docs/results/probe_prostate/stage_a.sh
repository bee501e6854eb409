#!/usr/bin/env bash
# docs/protocol_prostate.md, stage A on prostate (benchmarks/protocol_stage_a.sh with the 13/6/8 split of the 31
# cases, 60-epoch curves, the probe every 12). Resumable: rerun the same command.
#   JOBS=2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 bash docs/results/probe_prostate/stage_a.sh [DATA_DIR] [OUT_DIR]
#   (from the repository's root; JOBS=2: two runs at once, one thread each, on the 2-core CPU)
exec bash benchmarks/protocol_stage_a.sh gcl_prostate "${1:-${GCL_DATA_ROOT:-../shared/data}/prostate}" \
  "${2:-results/stageA_prostate}" 60 12 "--num_pretrain 13 --num_val 6 --num_test 8"
