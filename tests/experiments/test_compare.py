"""``python -m experiments compare``: cells of several experiments paired with a reference experiment."""

from __future__ import annotations

import json

import pytest
from scipy import stats

from experiments import results
from experiments.__main__ import main
from experiments.compare import comparison_report, load_experiment, setting_changes
from experiments.settings import SETTINGS_KEY, setting_differences
from experiments.status import write_status

SPLIT = {
    "pretrain": [{"image": "/a/p1.nii.gz"}],
    "train": [{"image": "/a/p2.nii.gz"}, {"image": "/a/p3.nii.gz"}],
    "val": [{"image": "/a/p4.nii.gz"}],
    "test": [{"image": "/a/p5.nii.gz"}],
}
PATIENTS = ("p2", "p3", "p2")


def _experiment(root, name, cells, settings=None, split=SPLIT, data="acdc", patients=PATIENTS):
    """An experiment folder: plan.json, split.json, results.csv (test and val rows) and each cell's recorded
    settings; ``cells`` maps (method, L) to the validation Dice per draw (the test Dice is 0.1 lower)."""
    folder = root / name
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({"name": name, "data": data}))
    (folder / "split.json").write_text(json.dumps(split))
    rows = []
    for (method, num_labeled), values in cells.items():
        for draw, value in enumerate(values):
            run_dir = folder / "finetune" / f"{method}_L{num_labeled}_d{draw}_s{draw}"
            recorded = {"seed": draw, "init": "random", **(settings or {})}
            write_status(run_dir, {"status": "finished", SETTINGS_KEY: recorded})
            for test_set, dice in (("val", value), ("test", value - 0.1)):
                rows.append(
                    {
                        "method": method,
                        "num_labeled": num_labeled,
                        "repeat": draw,
                        "draw": draw,
                        "seed": draw,
                        "test_set": test_set,
                        "dice": dice,
                        "status": "ok",
                        "labelled_patients": patients[draw],
                        "run_dir": f"/elsewhere/{run_dir.name}",
                    }
                )
    results.write_csv(rows, folder / "results.csv")
    return folder


def _interval(differences):
    mean = sum(differences) / len(differences)
    return stats.t.interval(0.95, len(differences) - 1, loc=mean, scale=stats.sem(differences))


def test_pairs_cells_with_the_reference_and_names_the_changed_setting(tmp_path):
    _experiment(tmp_path, "ref", {("random", 1): (0.40, 0.50, 0.45), ("mixup", 1): (0.50, 0.52, 0.50)})
    _experiment(tmp_path, "w10", {("mixup", 1): (0.30, 0.56, 0.48)}, settings={"consistency_weight": 1.0})
    ref, w10 = (load_experiment(tmp_path / n, "val") for n in ("ref", "w10"))
    assert setting_changes(ref, w10) == {"consistency_weight": (["(absent)"], [1.0])}
    lines = comparison_report([ref, w10], "val", baseline="random").splitlines()
    assert "- `w10`: consistency_weight (absent) → 1.0" in lines
    # hand-computed: w10 - ref = (-0.20, +0.04, -0.02); w10 - random of ref = (-0.10, +0.06, +0.03)
    lo, hi = _interval([-0.20, 0.04, -0.02])
    against_ref = f"−0.060 [{lo:+.3f}, {hi:+.3f}] (1 of 3)".replace("-", "−")
    lo, hi = _interval([-0.10, 0.06, 0.03])
    against_random = f"−0.003 [{lo:+.3f}, {hi:+.3f}] (2 of 3)".replace("-", "−")
    row = f"| Mixup | `w10` | d0s0 0.300, d1s1 0.560, d2s2 0.480 | 0.447 | {against_ref} | {against_random} |"
    assert row in lines
    # the baseline's own row first, without differences; the reference's rows without a difference to itself
    table = lines[lines.index("## L = 1") :]
    assert table[4] == "| Random Init. | `ref` | d0s0 0.400, d1s1 0.500, d2s2 0.450 | 0.450 |  |  |"
    assert table[5].startswith("| Mixup | `ref` |") and "|  | +0.057 [" in table[5]


def test_a_resolved_difference_is_bold_and_only_shared_draws_are_paired(tmp_path):
    _experiment(tmp_path, "ref", {("vat", 2): (0.50, 0.60, 0.55)})
    _experiment(tmp_path, "eps", {("vat", 2): (0.60, 0.71)}, settings={"vat_eps": 2.0})
    report = comparison_report([load_experiment(tmp_path / n, "test") for n in ("ref", "eps")], "test")
    lo, hi = _interval([0.10, 0.11])
    assert (
        f"| Adv. Training | `eps` | d0s0 0.500, d1s1 0.610 | 0.555 | **+0.105 [{lo:+.3f}, {hi:+.3f}] (2 of 2)** |"
        in report
    )
    assert "## L = 2" in report and "## L = 1" not in report
    # the fully supervised row (every training patient labelled) is headed L = all
    _experiment(tmp_path, "full", {("fully_supervised", 0): (0.7, 0.8, 0.75)})
    full = load_experiment(tmp_path / "full", "val")
    assert "## L = all" in comparison_report([full, full], "val")


def test_settings_added_later_are_not_a_difference():
    # a record written before ``labeled_pool`` existed reads it at its old value
    assert setting_differences({"lr": 0.1}, {"lr": 0.1, "labeled_pool": "train"}) == []
    assert setting_differences({"lr": 0.1}, {"lr": 0.1, "labeled_pool": "all"}) == [("labeled_pool", "train", "all")]
    assert setting_differences({"lr": 0.1, "x": 1}, {"lr": 0.2}) == [("lr", 0.1, 0.2), ("x", 1, "(absent)")]


def test_refuses_experiments_that_are_not_pairs(tmp_path):
    _experiment(tmp_path, "ref", {("mixup", 1): (0.5, 0.5, 0.5)})
    _experiment(tmp_path, "split", {("mixup", 1): (0.5, 0.5, 0.5)}, split={**SPLIT, "test": []})
    _experiment(tmp_path, "draws", {("mixup", 1): (0.5, 0.5, 0.5)}, patients=("p2", "p2", "p2"))
    _experiment(tmp_path, "prostate", {("mixup", 1): (0.5, 0.5, 0.5)}, data="prostate")
    ref = load_experiment(tmp_path / "ref", "val")
    with pytest.raises(ValueError, match="different splits"):
        comparison_report([ref, load_experiment(tmp_path / "split", "val")], "val")
    with pytest.raises(ValueError, match="mixup L=1 cell d1s1 labels p3 in ref but p2 in draws"):
        comparison_report([ref, load_experiment(tmp_path / "draws", "val")], "val")
    with pytest.raises(ValueError, match="fine-tunes on prostate"):
        comparison_report([ref, load_experiment(tmp_path / "prostate", "val")], "val")
    with pytest.raises(ValueError, match="no finished random cell"):
        comparison_report([ref, ref], "val", baseline="random")
    with pytest.raises(ValueError, match="no finished cell of vat on the val set"):
        comparison_report([ref, ref], "val", methods=["mixup", "vat"])
    with pytest.raises(FileNotFoundError, match="holds no plan.json"):
        load_experiment(tmp_path / "absent", "val")
    (tmp_path / "split" / "split.json").unlink()
    with pytest.raises(FileNotFoundError, match="holds no split.json"):
        load_experiment(tmp_path / "split", "val")


def test_command_writes_the_table_and_reports_bad_input(tmp_path, capsys):
    _experiment(tmp_path, "ref", {("random", 1): (0.4, 0.5, 0.45), ("mean_teacher", 1): (0.5, 0.5, 0.5)})
    _experiment(tmp_path, "w03", {("mean_teacher", 1): (0.4, 0.5, 0.6)}, settings={"consistency_weight": 0.3})
    out = tmp_path / "sweep.md"
    assert (
        main(
            [
                "compare",
                "--names",
                "ref",
                "w03",
                "--results-dir",
                str(tmp_path),
                "--baseline",
                "random",
                "--methods",
                "mean_teacher",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert text in capsys.readouterr().out
    assert "# Paired comparison on the `val` set; reference `ref`" in text
    assert "| Mean Teacher | `w03` | d0s0 0.400, d1s1 0.500, d2s2 0.600 | 0.500 | +0.000 [" in text
    with pytest.raises(SystemExit):
        main(["compare", "--names", "ref", "missing", "--results-dir", str(tmp_path)])
    assert "holds no plan.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", "--names", "ref", "--results-dir", str(tmp_path)])
    assert "at least one experiment to pair" in capsys.readouterr().err


def test_cells_without_recorded_settings_are_said_so(tmp_path):
    _experiment(tmp_path, "ref", {("mixup", 1): (0.5, 0.5, 0.5)})
    old = _experiment(tmp_path, "old", {("mixup", 1): (0.4, 0.5, 0.6)})
    for run_dir in (old / "finetune").iterdir():
        write_status(run_dir, {"status": "finished"})  # a cell trained before settings were recorded
    ref, older = (load_experiment(tmp_path / n, "val") for n in ("ref", "old"))
    assert setting_changes(ref, older) is None
    assert setting_changes(ref, ref) == {}
    assert "- `old`: no paired cell recorded its settings on both sides" in comparison_report([ref, older], "val")


def test_cells_of_several_pretraining_seeds_are_kept_apart_and_paired_seed_by_seed(tmp_path):
    """Two pre-training seeds of GCL do not overwrite each other: GCL seed s pairs with GCL seed s of the reference,
    and each seed's cell with random's cell of the same draw; the report warns that those intervals are too narrow."""
    values = {("random", None): (0.50, 0.60), ("gcl", 0): (0.55, 0.70), ("gcl", 1): (0.53, 0.64)}
    folders = []
    for name, shift in (("ref", 0.0), ("other", 0.01)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "plan.json").write_text(json.dumps({"name": name, "data": "acdc"}))
        (folder / "split.json").write_text(json.dumps(SPLIT))
        rows = [
            {
                "method": method,
                "num_labeled": 2,
                "repeat": draw,
                "draw": draw,
                "seed": draw,
                "pretrain_seed": "" if pre is None else pre,
                "test_set": "val",
                "dice": dice + (shift if method == "gcl" else 0.0),
                "status": "ok",
                "labelled_patients": PATIENTS[draw],
                "run_dir": "",
            }
            for (method, pre), dices in values.items()
            for draw, dice in enumerate(dices)
        ]
        results.write_csv(rows, folder / "results.csv")
        folders.append(load_experiment(folder, "val"))
    ref, other = folders
    assert len(ref.cells) == 6
    md = comparison_report([ref, other], "val", baseline="random")
    assert "Several pre-training seeds" in md
    # GCL of `other` against GCL of the reference: +0.01 on each of the 4 cells (2 draws x 2 seeds)
    assert "d0s0 0.560, d0s0p1 0.540, d1s1 0.710, d1s1p1 0.650" in md and "(4 of 4)" in md
    # GCL of the reference against random: 0.05, 0.10 (seed 0), 0.03, 0.04 (seed 1), each with random's own cell
    mean = (0.05 + 0.10 + 0.03 + 0.04) / 4
    assert f"+{mean:.3f} [" in md
