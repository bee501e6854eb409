#!/usr/bin/env bash
# Stages B and C of the pre-registered protocol (docs/protocol.md as amended: amendment 3, L = 2 first; amendment 5,
# stage C at the primary L only) on one dataset, then the assembled experiment and its registered analysis.
# Resumable: rerun the same command; finished cells are skipped.
#   RECIPE="--pretrain-set pixel_weight=0.1" JOBS=2 bash benchmarks/protocol_run.sh DATA PRESET [DATA_ROOT] [RESULTS_DIR]
# DATA: acdc or prostate; PRESET: its protocol preset (cpu-protocol, cpu-protocol-prostate). RECIPE: GCL's recipe
# and length as stage A chose them (the amendment that commits it); "default" for the bundles' default; unset: stop
# after stage B (stage C waits for stage A's choice). docs/results/protocol_<DATA>/run.sh holds each dataset's call.
# On a new machine, restore the records kept in docs/results/protocol_<DATA>/kept first (its README); REMAKE_ENCODERS=1
# then also pre-trains again the encoders that stayed on the old machine (for the test-split probe).
# SET_ASIDE_STALE=1: a pre-training made again with other bytes than its first encoder takes the new one and moves
# the cells that loaded the first to discarded/, to run again (by default it fails: experiments/remade.py).
# TEST_ROOT=DIR: patients never seen, in the layout of DATA (e.g. ACDC's official test set): every fine-tuned model is
# also evaluated on all of them, and the registered analysis also runs on those rows (`--test-set external`). After a
# finished run, the same command with TEST_ROOT trains nothing again: it only evaluates.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 DATA PRESET [DATA_ROOT] [RESULTS_DIR]" >&2
  exit 2
fi
DATA=$1 PRESET=$2
ROOT=${3:-${GCL_DATA_ROOT:-../shared/data}}
RESULTS=${4:-results}
B="python -m experiments --preset $PRESET --data $DATA --data-root $ROOT --results-dir $RESULTS --jobs ${JOBS:-2}"
B="$B${REMAKE_ENCODERS:+ --remake-encoders}${SET_ASIDE_STALE:+ --set-aside-stale-cells}${TEST_ROOT:+ --test-root $TEST_ROOT}"
A="python -m experiments protocol --results-dir $RESULTS"
CONTROL="--methods random supervised_encoder --pretrain-seeds 0 1"
registration() {  # L: the registered comparisons when L is primary
  if [ "$1" = 2 ]; then echo protocol; else echo protocol-L1; fi
}
stage_b() {  # L [reuse flags]: stage B at L, then its analysis on the validation rows
  local l=$1; shift
  $B $CONTROL --num-labeled "$l" --name "protocol-stageB-L${l}_$DATA" "$@"
  $A --name "protocol-stageB-L${l}_$DATA" --test-set val --registration "$(registration "$l")" > /dev/null
}
control_resolved() {  # L: the control's lift over random at L has a seed-aware interval above 0 (stage B's rule)
  python -m experiments control-resolved "$RESULTS/protocol-stageB-L$1_$DATA/protocol_analysis_val.csv" "$1"
  local verdict=$?
  [ "$verdict" -le 1 ] || exit "$verdict"  # 2: no analysis to read, not a verdict
  return "$verdict"
}
stage_b 2
if control_resolved 2; then
  primary=2
else
  stage_b 1 --pretrain-from "protocol-stageB-L2_$DATA"
  control_resolved 1 || { echo "Stage B: the control is resolved at neither L; the protocol stops here."; exit 0; }
  primary=1
fi
[ -n "${RECIPE:-}" ] || { echo "Stage B done (primary L = $primary). Stage C needs RECIPE (stage A's choice)."; exit 0; }
[ "$RECIPE" = default ] && RECIPE=""
# stage C at the primary L, taking stage B's cells over, and its registered analysis; cpu-protocol_<DATA> is stage C
# (amendment 5): its records kept under that name, analysed the same way
C="protocol-stageC-L${primary}_$DATA"
$B --num-labeled "$primary" --name "$C" $RECIPE --pretrain-from "protocol-stageB-L2_$DATA" \
  --finetune-from "protocol-stageB-L${primary}_$DATA"
analyse() {  # experiment: the registered analysis of its test rows, and of the never-seen patients' with TEST_ROOT
  $A --name "$1" --registration "$(registration "$primary")"
  [ -z "${TEST_ROOT:-}" ] || $A --name "$1" --registration "$(registration "$primary")" --test-set external
}
analyse "$C"
python -m experiments keep "$RESULTS/$C" "$RESULTS/cpu-protocol_$DATA"
analyse "cpu-protocol_$DATA"
