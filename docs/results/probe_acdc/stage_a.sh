#!/usr/bin/env bash
# docs/protocol.md, stage A on ACDC: probe learning curves (cross-validated probe on the training patients only).
# Resumable: rerun the same command; a finished step is skipped, a pre-training goes on from its last epoch.
#   bash docs/results/probe_acdc/stage_a.sh [DATA_DIR] [OUT_DIR]       (from the repository's root)
set -u
DATA=${1:-${GCL_DATA_ROOT:-../shared/data}/acdc}
OUT=${2:-results/stageA}
CFG=bundles/gcl_acdc/configs/pretrain.json
W=$OUT/work
SPLIT="--num_pretrain 40 --num_val 12 --num_test 20"
SIMCLR="--meta_labels [None] --pixel_branch False --mitigate False --grad_filter_enabled False"
mkdir -p "$OUT"
pre() {  # method seed [overrides...]
  local m=$1 s=$2; shift 2
  local name=$m; [ "$s" -gt 0 ] && name=${m}_p$s
  [ -f "$W/pretrain/$name/encoder.pt" ] && return
  python -m monai.bundle run pretrain --config_file $CFG --dataset_dir "$DATA" --work_dir "$W" $SPLIT --method "$name" \
    --seed "$s" --epochs 20 --probe_interval 4 "$@" >> "$OUT/$name.log" 2>&1
}
probe() {  # name encoder [overrides...]
  local name=$1 encoder=$2; shift 2
  [ -f "$OUT/$name/probe.json" ] || python -m gcl_monai.probe --config_file $CFG --dataset_dir "$DATA" --work_dir "$W" \
    $SPLIT --encoder "$encoder" --output_dir "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
}
probe random_s0 random --encoder_seed 0
probe random_s1 random --encoder_seed 1
# the positive control: a U-Net trained with the labels of every training patient (1000 iterations)
[ -f "$W/control/models/model.pt" ] || python -m monai.bundle run --config_file bundles/gcl_acdc/configs/train.json \
  --dataset_dir "$DATA" --work_dir "$W" $SPLIT --init random --labeled "\$@split['pretrain'] + @split['train']" \
  --epochs 20 --iterations_per_epoch 50 --output_dir "$W/control" --ckpt_dir "$W/control/models" > "$OUT/control_train.log" 2>&1
probe control "$W/control/models/model.pt"
pre gcl 0
pre simclr 0 $SIMCLR
pre gcl 1
pre simclr 1 $SIMCLR
python -m gcl_monai.probe.curves "$W"/pretrain/gcl "$W"/pretrain/gcl_p1 "$W"/pretrain/simclr* \
  --output_dir "$OUT/curves" --reference random="$OUT/random_s0/probe.json" control="$OUT/control/probe.json"
# step 2: the recipe variants, pre-trained like the default (20 epochs, the probe every 4) and compared with it at
# epoch 20 (amendment 1); seed 0 of each, then seed 1 of those whose seed 0 is above the default's mean (amendment 2)
pre gcl_pw01 0 --pixel_weight 0.1
pre gcl_nopix 0 --pixel_branch False
pre gcl_nomit 0 --mitigate False
above_default() {  # variant: its seed-0 probe at epoch 20 > the mean of the default's seeds 0 and 1 there
  python - "$W/pretrain" "$1" <<'PY'
import sys
from gcl_monai.probe.curves import read_history
root, variant = sys.argv[1:]
default = sum(read_history(f"{root}/{r}")[20] for r in ("gcl", "gcl_p1")) / 2
sys.exit(0 if read_history(f"{root}/{variant}")[20] > default else 1)
PY
}
above_default gcl_pw01 && pre gcl_pw01 1 --pixel_weight 0.1
above_default gcl_nopix && pre gcl_nopix 1 --pixel_branch False
above_default gcl_nomit && pre gcl_nomit 1 --mitigate False
python -m gcl_monai.probe.curves "$W"/pretrain/gcl* --output_dir "$OUT/curves_recipe" \
  --reference random="$OUT/random_s0/probe.json" control="$OUT/control/probe.json"
