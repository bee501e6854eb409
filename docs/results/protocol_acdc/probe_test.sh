#!/usr/bin/env bash
# docs/protocol.md, "Secondary comparisons": the probe Dice of every encoder of the registered run on the test
# patients (`python -m gcl_monai.probe --eval test`: fitted on the 48 training patients, scored on the 20 test
# patients of the experiment's own split file), per encoder and seed, descriptively; random encoders of seeds 0-2
# beside them. Run after the registered analysis. Resumable: a probe already written is skipped. The encoders are
# those of stage C's experiment (EXPERIMENT); the rows go to cpu-protocol_acdc/probe_test, beside its analysis.
#   bash docs/results/protocol_acdc/probe_test.sh [DATA_ROOT] [RESULTS_DIR] [EXPERIMENT]     (from the repository's root)
# JOBS=2 OMP_NUM_THREADS=1: two probes at once, one thread each (benchmarks/spawn.sh).
set -eu
ROOT=${1:-${GCL_DATA_ROOT:-../shared/data}}
RESULTS=${2:-results}
EXP=$RESULTS/${3:-protocol-stageC-L2_acdc}
OUT=$RESULTS/cpu-protocol_acdc/probe_test
[ -f "$EXP/split.json" ] || { echo "$EXP/split.json does not exist: run docs/results/protocol_acdc/run.sh first." >&2; exit 1; }
METHODS="supervised_encoder simclr gcl"
for method in $METHODS; do  # first: every encoder still to probe is here (records restored from another machine?)
  for name in $method ${method}_p1 ${method}_p2; do
    if [ ! -f "$OUT/$name/probe.json" ] && [ ! -f "$EXP/pretrain/$name/encoder.pt" ]; then
      echo "$EXP/pretrain/$name/encoder.pt is not on this machine: make the encoders again with" >&2
      echo "  REMAKE_ENCODERS=1 RECIPE=default bash docs/results/protocol_acdc/run.sh $ROOT $RESULTS" >&2
      exit 1
    fi
  done
done
probe() {  # name encoder [overrides...]
  local name=$1 encoder=$2; shift 2
  [ -f "$OUT/$name/probe.json" ] || python -m gcl_monai.probe --config_file bundles/gcl_acdc/configs/pretrain.json \
    --dataset_dir "$ROOT/acdc" --work_dir "$OUT/work" --split_file "$EXP/split.json" --eval test --encoder "$encoder" \
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
