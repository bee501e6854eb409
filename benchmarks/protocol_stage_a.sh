#!/usr/bin/env bash
# Stage A of the pre-registered protocol (docs/protocol.md; docs/protocol_prostate.md) on one dataset: the probe's
# learning curves (cross-validated probe over the training patients only), then the recipe variants. Resumable:
# rerun the same command; a finished step is skipped, a pre-training goes on from its last epoch.
#   bash benchmarks/protocol_stage_a.sh BUNDLE DATA_DIR OUT_DIR EPOCHS PROBE_INTERVAL SPLIT   (from the repository's root)
# e.g. bash benchmarks/protocol_stage_a.sh gcl_acdc ../shared/data/acdc results/stageA 20 4 \
#          "--num_pretrain 40 --num_val 12 --num_test 20"           (docs/results/probe_*/stage_a.sh hold each run's)
# JOBS=N (default 1): up to N runs at once where nothing orders them (the probes of the references, the control,
# each step's pre-trainings; benchmarks/spawn.sh); give each one thread (OMP_NUM_THREADS=1) on a CPU of N cores.
set -u
if [ $# -ne 6 ]; then
  echo "usage: $0 BUNDLE DATA_DIR OUT_DIR EPOCHS PROBE_INTERVAL SPLIT" >&2
  exit 2
fi
BUNDLE=bundles/$1/configs DATA=$2 OUT=$3 EPOCHS=$4 INTERVAL=$5 SPLIT=$6
CFG=$BUNDLE/pretrain.json
W=$OUT/work
SIMCLR="--meta_labels [None] --pixel_branch False --mitigate False --grad_filter_enabled False"
. "$(dirname "$0")/spawn.sh"
mkdir -p "$OUT"
pre() {  # method seed [overrides...]
  local m=$1 s=$2; shift 2
  local name=$m; [ "$s" -gt 0 ] && name=${m}_p$s
  [ -f "$W/pretrain/$name/encoder.pt" ] && return
  python -m monai.bundle run pretrain --config_file $CFG --dataset_dir "$DATA" --work_dir "$W" $SPLIT --method "$name" \
    --seed "$s" --epochs "$EPOCHS" --probe_interval "$INTERVAL" "$@" >> "$OUT/$name.log" 2>&1
}
probe() {  # name encoder [overrides...]
  local name=$1 encoder=$2; shift 2
  [ -f "$OUT/$name/probe.json" ] || python -m gcl_monai.probe --config_file $CFG --dataset_dir "$DATA" --work_dir "$W" \
    $SPLIT --encoder "$encoder" --output_dir "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
}
control() {  # the positive control: a U-Net trained with the labels of every training patient (1000 iterations)
  [ -f "$W/control/models/model.pt" ] || python -m monai.bundle run --config_file $BUNDLE/train.json \
    --dataset_dir "$DATA" --work_dir "$W" $SPLIT --init random --labeled "\$@split['pretrain'] + @split['train']" \
    --epochs 20 --iterations_per_epoch 50 --output_dir "$W/control" --ckpt_dir "$W/control/models" \
    > "$OUT/control_train.log" 2>&1
  probe control "$W/control/models/model.pt"
}
spawn probe random_s0 random --encoder_seed 0
spawn probe random_s1 random --encoder_seed 1
spawn control
spawn pre gcl 0
spawn pre simclr 0 $SIMCLR
spawn pre gcl 1
spawn pre simclr 1 $SIMCLR
wait
python -m gcl_monai.probe.curves "$W"/pretrain/gcl "$W"/pretrain/gcl_p1 "$W"/pretrain/simclr* \
  --output_dir "$OUT/curves" --reference random="$OUT/random_s0/probe.json" control="$OUT/control/probe.json"
# step 2 (docs/protocol.md, amendments 1 and 2): each variant pre-trained like the default and compared with it at
# GCL's length by the rule of step 1; seed 0 of each, then seed 1 of those whose seed 0 is above the default's mean
CHOSEN=$(python -m gcl_monai.probe.rules length "$W/pretrain/gcl" "$W/pretrain/gcl_p1") || exit 1
echo "Stage A: GCL's length by the rule: $CHOSEN epochs (step 2 compares the variants there)" | tee "$OUT/chosen_length.txt"
spawn pre gcl_pw01 0 --pixel_weight 0.1
spawn pre gcl_nopix 0 --pixel_branch False
spawn pre gcl_nomit 0 --mitigate False
wait
above_default() {  # variant: its seed-0 probe at the chosen length > the mean of the default's seeds 0 and 1 there
  python -m gcl_monai.probe.rules above "$W/pretrain/$1" --than "$W/pretrain/gcl" "$W/pretrain/gcl_p1" --epoch "$CHOSEN"
  local verdict=$?
  [ "$verdict" -le 1 ] || exit "$verdict"  # 2: no probe at that epoch, not a verdict
  return "$verdict"
}
above_default gcl_pw01 && spawn pre gcl_pw01 1 --pixel_weight 0.1
above_default gcl_nopix && spawn pre gcl_nopix 1 --pixel_branch False
above_default gcl_nomit && spawn pre gcl_nomit 1 --mitigate False
wait
python -m gcl_monai.probe.curves "$W"/pretrain/gcl* --output_dir "$OUT/curves_recipe" \
  --reference random="$OUT/random_s0/probe.json" control="$OUT/control/probe.json"
