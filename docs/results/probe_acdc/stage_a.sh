#!/usr/bin/env bash
# docs/protocol.md, stage A on ACDC (benchmarks/protocol_stage_a.sh with ACDC's split, 20 epochs, the probe every
# 4; the rule chose 20 epochs, where step 2 compared the variants). Resumable: rerun the same command.
#   bash docs/results/probe_acdc/stage_a.sh [DATA_DIR] [OUT_DIR]       (from the repository's root)
exec bash benchmarks/protocol_stage_a.sh gcl_acdc "${1:-${GCL_DATA_ROOT:-../shared/data}/acdc}" "${2:-results/stageA}" \
  20 4 "--num_pretrain 40 --num_val 12 --num_test 20"
