"""The probe command (``python -m gcl_monai.probe``) on the phantom: a labelled encoder above a random one, the same
figures twice and written, the test mode, a bad mode refused."""

import json

import pytest

from gcl_monai.probe.__main__ import probe_command
from tests.bundles.test_bundles import DEMO


def test_an_encoder_trained_with_labels_probes_above_a_random_one(probed):
    _, random_a, _, labelled, _ = probed
    # measured margins 0.27 to 0.30 (seeds, threads: _supervised_encoder); 0.15 holds with room on either side
    assert labelled["dice"] > random_a["dice"] + 0.15, (labelled["dice"], random_a["dice"])
    assert set(labelled["dice_per_class"]) == {"rv", "myocardium", "lv"}


def test_the_probe_gives_the_same_figures_twice_and_writes_them(probed):
    root, random_a, random_b, _, _ = probed
    assert random_a["volumes"] == random_b["volumes"] and random_a["dice"] == random_b["dice"]
    written = json.loads((root / "random_a" / "probe.json").read_text())
    assert written["dice"] == random_a["dice"] and written["settings"]["mode"] == "cross-validation"
    scored = sorted(p for fold in written["folds"] for p in fold["scored_patients"])
    fitted = {p for fold in written["folds"] for p in fold["fit_patients"]}
    assert scored == sorted(fitted) and len(written["folds"]) == 2
    for fold in written["folds"]:
        assert not set(fold["fit_patients"]) & set(fold["scored_patients"])


def test_the_test_mode_scores_the_test_patients_only(probed):
    root, _, _, labelled, test = probed
    split = json.loads((root / "outputs" / "split.json").read_text())
    test_patients = {str(d["patient"]) for d in split["test"]}
    assert {v["patient"] for v in test["volumes"]} == test_patients
    assert not set(test["folds"][0]["fit_patients"]) & test_patients
    assert test["settings"]["mode"] == "test"


def test_the_probe_command_refuses_a_bad_mode(tmp_path):
    with pytest.raises(ValueError, match="--eval"):
        probe_command(str(DEMO / "pretrain.json"), "random", str(tmp_path), eval="val")
