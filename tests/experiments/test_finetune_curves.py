"""The learning-curve driver's folds (stratified, disjoint, the test split untouched) and its variants table."""

import csv
import json
from collections import Counter

from benchmarks.finetune_curves import collect, fold_split


def _base():
    groups = ["DCM", "HCM", "MINF", "NOR", "RV"]
    entries = [
        {"patient": f"p{g}{i:02d}", "group": g, "organ_state": s} for g in groups for i in range(16) for s in (0, 1)
    ]
    train = [e for e in entries if int(e["patient"][-2:]) < 12]
    return {
        "pretrain": train[:96],
        "train": train[96:112],
        "val": train[112:],
        "test": [e for e in entries if e not in train],
    }


def test_folds_partition_the_training_patients_by_group_and_keep_the_test_split():
    base = _base()
    folds = [fold_split(base, 5, k, pool=8) for k in range(5)]
    vals = [{e["patient"] for e in f["val"]} for f in folds]
    assert [len(v) for v in vals] == [12] * 5
    assert set().union(*vals) == {e["patient"] for k in ("pretrain", "train", "val") for e in base[k]}
    assert all(not vals[i] & vals[j] for i in range(5) for j in range(i + 1, 5))
    for fold, val in zip(folds, vals):
        per_group = Counter(e["group"] for e in fold["val"] if e["organ_state"] == 0)
        assert len(per_group) == 5 and max(per_group.values()) - min(per_group.values()) <= 1  # 12 of 60: 2-3 each
        pool = {e["patient"] for e in fold["train"]}
        assert len(pool) == 8 and not pool & val
        assert not {e["patient"] for e in fold["pretrain"]} & (pool | val)
        assert fold["test"] == base["test"]
    assert fold_split(base, 5, 2, pool=8) == folds[2]  # seeded: the same fold every time


def test_collect_puts_each_runs_variants_in_one_row(tmp_path):
    for run, dice in (("f0_defaults_L2_d0_s0", 0.5), ("f0_elastic_L2_d0_s0", 0.6)):
        path = tmp_path / "runs" / run / "model" / "eval" / "dice.json"
        path.parent.mkdir(parents=True)
        summary = {"dice": dice, "dice_ed": dice + 0.03, "dice_pooled_2d": dice + 0.02, "num_volumes": 24}
        path.write_text(json.dumps({**summary, "num_volumes_ed": 12, "per_volume": []}))
    with collect(tmp_path).open() as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["f0_defaults_L2_d0_s0", "f0_elastic_L2_d0_s0"]
    assert float(rows[1]["dice_ed"]) == 0.63 and rows[0]["num_volumes_ed"] == "12"
