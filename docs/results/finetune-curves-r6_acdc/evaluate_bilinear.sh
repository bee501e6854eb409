#!/usr/bin/env bash
# Amendment 2 (README.md here): each finished run's kept model on its fold's validation patients, original labels,
# the prediction taken back as bilinear class probabilities (--pred_interp bilinear). Run from a checkout at the
# amendment's commit, with the runs' folder of the round's worktree:
#   RUNS=<worktree at 5fb1bc8>/docs/results/finetune-curves-r6_acdc/runs DATA=../shared/data \
#   OUT=docs/results/finetune-curves-r6_acdc bash docs/results/finetune-curves-r6_acdc/evaluate_bilinear.sh
set -euo pipefail
RUNS="${RUNS:?the runs folder of the round}"
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/finetune-curves-r6_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
CONFIGS="['bundles/gcl_acdc/configs/train.json','bundles/gcl_acdc/configs/evaluate.json']"
for run in "$RUNS"/f*_L*_d0_s0/; do
    run="${run%/}"
    # only a finished run: its nearest scoring (evaluate_val.sh, after the last row of curves.csv) is there
    [[ -f "$run/model/eval/dice.json" && ! -f "$run/model/bilinear/eval/dice.json" ]] || continue
    grid=()
    [[ "$run" == *grid192* ]] && grid=(--image_size "[192,192]")
    python -m monai.bundle run --config_file "$CONFIGS" --split_file "$run/split.json" --test_split val \
        --dataset_dir "$DATA/acdc" --work_dir "$run/model/bilinear" --ckpt_dir "$run/model" \
        --output_dir "$run/model/bilinear" --num_workers 0 --init random --dice_grid input --pred_interp bilinear \
        "${grid[@]}" > "$run/model/eval_bilinear.log" 2>&1
done
python - "$RUNS" "$OUT" <<'PY'
import csv, json, sys
from pathlib import Path
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
fields = ["run", "dice", "dice_ed", "dice_pooled_2d", "rv", "myocardium", "lv", "num_volumes"]
with open(out / "variants_val_bilinear.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for summary in sorted(runs.glob("*/model/bilinear/eval/dice.json")):
        d = json.loads(summary.read_text())
        writer.writerow({"run": summary.parents[3].name, "num_volumes": d["num_volumes"],
                         **{k: round(d[k], 4) for k in ("dice", "dice_ed", "dice_pooled_2d")},
                         **{k: round(v, 4) for k, v in d["dice_per_class"].items()}})
PY
