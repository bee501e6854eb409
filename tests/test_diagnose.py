"""The diagnosis tool: summary of a recorded trajectory (hand-made rows) and an end-to-end run on the phantom."""

import csv
import json
import math
from pathlib import Path

import pytest

from gcl_monai.diagnose import summarise, write_diagnosis
from gcl_monai.diagnose.__main__ import main, parse_overrides

REPO = Path(__file__).resolve().parents[1]
CHANCE = math.log(31)  # batch of 16 images, two views


def _rows(n=10, std_end=0.03):
    rows = []
    for t in range(n):
        rows.append({
            "iteration": t + 1.0,
            "batch_size": 16.0,
            "img/a": 3.5 - 0.05 * t,  # 3.50 .. 3.05
            "img/b": CHANCE + 0.001 * (t % 2),  # stays at chance
            "pix/a": 2.0,
            "pix/b": 1.0 - 0.1 * t,
            "std/img": 0.02 + (std_end - 0.02) * t / (n - 1),
            "cos/img": 0.9 - 0.05 * t,
            "cos_0_1": -0.3, "cos_1_0": -0.3 if t < n - 1 else -0.1,
            "target_0_1": -0.01 * t, "target_1_0": -0.02 * t,
            "acted_0_1": 1.0 if t % 2 else 0.0, "acted_1_0": 0.5,
            "change": 0.1,
        })
    return rows


def test_summary_of_hand_made_trajectory(tmp_path):
    s = summarise(_rows(), ["a", "b"], window_fraction=0.2)  # windows of 2 iterations
    assert s.iterations == 10 and s.window == 2 and s.chance == pytest.approx(CHANCE)
    assert s.labels["a"]["img_first"] == pytest.approx(3.475) and s.labels["a"]["img_last"] == pytest.approx(3.075)
    assert s.labels["a"]["img_drop"] == pytest.approx(0.4) and not s.labels["a"]["at_chance"]
    assert s.labels["b"]["at_chance"] and s.verdict == "stalled: b"
    assert s.labels["b"]["pix_first"] == pytest.approx(0.95) and s.labels["b"]["pix_last"] == pytest.approx(0.15)
    assert s.mean_drop == pytest.approx((0.4 + 0.0) / 2, abs=1e-3)
    assert s.cos_img == pytest.approx((0.875, 0.475))
    assert s.pairs["a vs b"] == pytest.approx({"cos_mean": -0.3, "cos_last": -0.3, "target_last": -0.09, "acted": 0.5})
    assert s.pairs["b vs a"]["cos_last"] == pytest.approx(-0.2) and s.pairs["b vs a"]["cos_mean"] == pytest.approx(-0.28)
    assert s.change == pytest.approx(0.1)
    reference = {"mean_drop": 0.4, "std_img": [0.0, 0.06]}
    s = summarise(_rows(), ["a", "b"], window_fraction=0.2, reference=reference)
    std_last = 0.02 + 0.01 * (8 / 9 + 1) / 2  # last window: t = 8, 9
    assert s.std_img[1] == pytest.approx(std_last)
    assert s.reference["drop_ratio"] == pytest.approx(0.5, abs=1e-2) and s.reference["std_ratio"] == pytest.approx(std_last / 0.06)
    report = write_diagnosis(tmp_path, _rows(), s, header="# test\n")
    text = report.read_text()
    assert text.startswith("# test") and "stalled: b" in text and "| a vs b |" in text
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "stalled: b"
    assert len(list(csv.DictReader(open(tmp_path / "trajectory.csv")))) == 10


def test_collapse_and_training_verdicts():
    assert summarise(_rows(std_end=1e-4), ["a", "b"]).verdict == "collapsed"
    rows = [{k: v for k, v in r.items() if not k.endswith("/b") and k[-2:] not in ("_1", "_0")} for r in _rows()]
    s = summarise(rows, ["a"])
    assert s.verdict == "training" and s.pairs == {} and math.isnan(s.change) is False
    with pytest.raises(ValueError, match="no iterations"):
        summarise([], ["a"])


def test_parse_overrides():
    got = parse_overrides(["--meta_labels", "[None]", "--pixel_branch", "False", "--lr=0.1", "--recipe", "paper"])
    assert got == {"meta_labels": [None], "pixel_branch": False, "lr": 0.1, "recipe": "paper"}
    with pytest.raises(ValueError, match="no value"):
        parse_overrides(["--lr"])
    with pytest.raises(ValueError, match="override"):
        parse_overrides(["lr", "0.1"])


def test_diagnose_end_to_end_on_the_phantom(tmp_path, capsys):
    out = tmp_path / "diag"
    argv = ["--config_file", str(REPO / "bundles" / "gcl_demo" / "configs" / "pretrain.json"), "--output_dir", str(out),
            "--iterations", "3", "--num_patients", "6", "--num_pretrain", "2", "--num_val", "1", "--num_test", "1",
            "--image_size", "[32,32]", "--features", "[4,4,8,8,16,4]", "--batch_size", "4", "--epochs", "2"]
    assert main(argv) == 0
    rows = list(csv.DictReader(open(out / "trajectory.csv")))
    assert [float(r["iteration"]) for r in rows] == [1.0, 2.0, 3.0]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["labels"]) == {"patient_id", "slice_quantile", "organ_state"}
    assert summary["chance"] == pytest.approx(math.log(7)) and len(summary["pairs"]) == 6
    assert "Verdict" in capsys.readouterr().out and (out / "curves.png").is_file()
