#!/usr/bin/env bash
# Each kept model of models.csv on its fold's validation patients, original labels (--dice_grid input), with the
# prediction taken back to the volume's grid both ways (--pred_interp nearest, bilinear; README.md here). The run
# folders sit in the worktrees of their rounds under RUNS_ROOT. Run from a checkout at this plan's commit:
#   RUNS_ROOT=/work DATA=../shared/data OUT=docs/results/pred-interp_acdc bash docs/results/pred-interp_acdc/evaluate.sh
# Resumable: an evaluation with a dice.json is not run again.
set -euo pipefail
RUNS_ROOT="${RUNS_ROOT:?the folder that holds the rounds worktrees}"
DATA="${DATA:-../shared/data}"
OUT="${OUT:-docs/results/pred-interp_acdc}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
CONFIGS="['bundles/gcl_acdc/configs/train.json','bundles/gcl_acdc/configs/evaluate.json']"
tail -n +2 "$OUT/models.csv" | while IFS=, read -r model _ _ run_dir _ recipe _; do
    run="$RUNS_ROOT/$run_dir"
    network=()  # the evaluation's preprocessing and network are those the model was trained with
    [[ "$recipe" == native176 ]] && network=(--grid native --image_size "[176,176]" --fov_scale 1.0)
    [[ "$recipe" == width512 ]] && network=(--features "[32,64,128,256,512,32]")
    for interp in nearest bilinear; do
        eval_dir="$OUT/runs/${model}_$interp"
        [[ -f "$eval_dir/eval/dice.json" ]] && continue
        mkdir -p "$eval_dir"
        python -m monai.bundle run --config_file "$CONFIGS" --split_file "$run/split.json" --test_split val \
            --dataset_dir "$DATA/acdc" --work_dir "$eval_dir" --ckpt_dir "$run/model" --output_dir "$eval_dir" \
            --num_workers 0 --init random --dice_grid input --pred_interp "$interp" "${network[@]}" \
            > "$eval_dir/eval.log" 2>&1
    done
done
python - "$OUT" <<'PY'
import csv, json, sys
from pathlib import Path
out = Path(sys.argv[1])
fields = ["model", "pred_interp", "dice", "dice_ed", "dice_pooled_2d", "rv", "myocardium", "lv", "num_volumes"]
with open(out / "dice_val.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in csv.DictReader(open(out / "models.csv")):
        for interp in ("nearest", "bilinear"):
            d = json.loads((out / "runs" / f"{row['model']}_{interp}" / "eval" / "dice.json").read_text())
            writer.writerow({"model": row["model"], "pred_interp": interp, "num_volumes": d["num_volumes"],
                             **{k: round(d[k], 4) for k in ("dice", "dice_ed", "dice_pooled_2d")},
                             **{k: round(v, 4) for k, v in d["dice_per_class"].items()}})
PY
