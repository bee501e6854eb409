#!/usr/bin/env bash
# The protocol's descriptive secondary (docs/protocol.md, "Secondary comparisons"; docs/protocol_prostate.md takes it
# over): the probe Dice of every encoder of the registered run on the test patients (`python -m gcl_monai.probe
# --eval test`: fitted on the training patients, scored on the test patients of the experiment's own split file), per
# encoder and seed, descriptively; random encoders of seeds 0-2 beside them. Run after the registered analysis.
# Resumable: a probe already written is skipped. The encoders are those of stage C's experiment (EXPERIMENT); the
# rows go to cpu-protocol_<DATA>/probe_test, beside its analysis (PROBE_OUT: another folder, for another registered
# run). docs/results/protocol_<DATA>/probe_test.sh holds each dataset's call, docs/results/cpu-converged_acdc/
# probe_test.sh that of protocol_converged's run.
#   RECIPE=... bash benchmarks/probe_test.sh DATA [DATA_ROOT] [RESULTS_DIR] [EXPERIMENT]   (from the repository's root)
# DATA: acdc or prostate (bundles/gcl_<DATA>, DATA_ROOT/<DATA>). RECIPE: stage A's choice, as run.sh had it, for the
# command that makes missing encoders again; BRING_BACK: another command that brings them back, named instead.
# JOBS=2 OMP_NUM_THREADS=1: two probes at once, one thread each (benchmarks/spawn.sh).
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 DATA [DATA_ROOT] [RESULTS_DIR] [EXPERIMENT]" >&2
  exit 2
fi
DATA=$1
ROOT=${2:-${GCL_DATA_ROOT:-../shared/data}}
RESULTS=${3:-results}
EXP=$RESULTS/${4:-protocol-stageC-L2_$DATA}
OUT=${PROBE_OUT:-$RESULTS/cpu-protocol_$DATA/probe_test}
[ -f "bundles/gcl_$DATA/configs/pretrain.json" ] || { echo "no bundle bundles/gcl_$DATA for DATA=$DATA" >&2; exit 2; }
[ -f "$EXP/split.json" ] || {
  echo "$EXP/split.json does not exist: run its experiment first (stage C: docs/results/protocol_$DATA/run.sh)." >&2
  exit 1
}
METHODS="supervised_encoder simclr gcl"
for method in $METHODS; do  # first: every encoder still to probe is here (records restored from another machine?)
  for name in $method ${method}_p1 ${method}_p2; do
    if [ ! -f "$OUT/$name/probe.json" ] && [ ! -f "$EXP/pretrain/$name/encoder.pt" ]; then
      echo "$EXP/pretrain/$name/encoder.pt is not on this machine: bring the encoders back with" >&2
      echo "  ${BRING_BACK:-REMAKE_ENCODERS=1 RECIPE=\"${RECIPE:-default}\" bash docs/results/protocol_$DATA/run.sh $ROOT $RESULTS}" >&2
      exit 1
    fi
  done
done
probe() {  # name encoder [overrides...]
  local name=$1 encoder=$2; shift 2
  [ -f "$OUT/$name/probe.json" ] || python -m gcl_monai.probe --config_file "bundles/gcl_$DATA/configs/pretrain.json" \
    --dataset_dir "$ROOT/$DATA" --work_dir "$OUT/work" --split_file "$EXP/split.json" --eval test --encoder "$encoder" \
    --output_dir "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
}
. benchmarks/spawn.sh
mkdir -p "$OUT"
runs=()
for seed in 0 1 2; do
  spawn probe "random_s$seed" random --encoder_seed "$seed"
  runs+=("$OUT/random_s$seed")
done
for method in $METHODS; do
  for name in $method ${method}_p1 ${method}_p2; do
    spawn probe "$name" "$EXP/pretrain/$name/encoder.pt"
    runs+=("$OUT/$name")
  done
done
wait
python -m gcl_monai.probe.table "$OUT/probe_test.csv" "${runs[@]}"
