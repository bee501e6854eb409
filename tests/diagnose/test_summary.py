"""The summary of a recorded trajectory (hand-made rows): windows, drops, chance, verdicts, the written report."""

import csv
import json
import math

import pytest

from gcl_monai.diagnose import summarise, write_diagnosis
from tests.diagnose.diagnose_helpers import CHANCE, _rows


def test_summary_of_hand_made_trajectory(tmp_path):
    s = summarise(_rows(), ["a", "b"], window_fraction=0.2)  # windows of 2 iterations
    assert s.iterations == 10 and s.window == 2 and s.chance == pytest.approx(CHANCE)
    assert s.labels["a"]["img_first"] == pytest.approx(3.475) and s.labels["a"]["img_last"] == pytest.approx(3.075)
    assert s.labels["a"]["img_drop"] == pytest.approx(0.4) and s.labels["a"]["below_chance"]
    assert not s.labels["b"]["below_chance"] and s.verdict == "stalled at chance: b"
    above = [{**r, "img/b": CHANCE + 0.5} for r in _rows()]
    assert summarise(above, ["a", "b"]).verdict == "above chance: b"
    assert s.labels["b"]["pix_first"] == pytest.approx(0.95) and s.labels["b"]["pix_last"] == pytest.approx(0.15)
    assert s.mean_drop == pytest.approx((0.4 + 0.0) / 2, abs=1e-3)
    assert s.cos_img == pytest.approx((0.875, 0.475))
    assert s.pairs["a vs b"] == pytest.approx({"cos_mean": -0.3, "cos_last": -0.3, "target_last": -0.09, "acted": 0.5})
    assert s.pairs["b vs a"]["cos_last"] == pytest.approx(-0.2)
    assert s.pairs["b vs a"]["cos_mean"] == pytest.approx(-0.28)
    assert s.change == pytest.approx(0.1)
    reference = {"mean_drop": 0.4, "std_img": [0.0, 0.06]}
    s = summarise(_rows(), ["a", "b"], window_fraction=0.2, reference=reference)
    std_last = 0.02 + 0.01 * (8 / 9 + 1) / 2  # last window: t = 8, 9
    assert s.std_img[1] == pytest.approx(std_last)
    assert s.reference["drop_ratio"] == pytest.approx(0.5, abs=1e-2)
    assert s.reference["std_ratio"] == pytest.approx(std_last / 0.06)
    report = write_diagnosis(tmp_path, _rows(), s, header="# test\n")
    text = report.read_text()
    assert text.startswith("# test") and "stalled at chance: b" in text and "| a vs b |" in text
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == "stalled at chance: b"
    assert len(list(csv.DictReader(open(tmp_path / "trajectory.csv")))) == 10


def test_collapse_and_training_verdicts():
    assert summarise(_rows(std_end=1e-4), ["a", "b"]).verdict == "collapsed"
    rows = [{k: v for k, v in r.items() if not k.endswith("/b") and k[-2:] not in ("_1", "_0")} for r in _rows()]
    s = summarise(rows, ["a"])
    assert s.verdict == "training" and s.pairs == {} and math.isnan(s.change) is False
    with pytest.raises(ValueError, match="no iterations"):
        summarise([], ["a"])
