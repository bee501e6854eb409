"""The diagnosis tool: summary of a recorded trajectory (hand-made rows) and an end-to-end run on the phantom."""

import csv
import json
import math
import os
from pathlib import Path

import pytest
import torch

from gcl_monai.diagnose import alignment, embedding_rank, summarise, uniformity, write_diagnosis
from gcl_monai.diagnose.__main__ import main, parse_overrides

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
CHANCE = math.log(31)  # batch of 16 images, two views


def _rows(n=10, std_end=0.03):
    rows = []
    for t in range(n):
        rows.append(
            {
                "iteration": t + 1.0,
                "batch_size": 16.0,
                "img/a": 3.5 - 0.05 * t,  # 3.50 .. 3.05
                "img/b": CHANCE + 0.001 * (t % 2),  # stays at chance
                "pix/a": 2.0,
                "pix/b": 1.0 - 0.1 * t,
                "std/img": 0.02 + (std_end - 0.02) * t / (n - 1),
                "cos/img": 0.9 - 0.05 * t,
                "cos_0_1": -0.3,
                "cos_1_0": -0.3 if t < n - 1 else -0.1,
                "target_0_1": -0.01 * t,
                "target_1_0": -0.02 * t,
                "acted_0_1": 1.0 if t % 2 else 0.0,
                "acted_1_0": 0.5,
                "change": 0.1,
            }
        )
    return rows


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


def test_parse_overrides():
    got = parse_overrides(["--meta_labels", "[None]", "--pixel_branch", "False", "--lr=0.1", "--recipe", "paper"])
    assert got == {"meta_labels": [None], "pixel_branch": False, "lr": 0.1, "recipe": "paper"}
    with pytest.raises(ValueError, match="no value"):
        parse_overrides(["--lr"])
    with pytest.raises(ValueError, match="override"):
        parse_overrides(["lr", "0.1"])


@pytest.mark.parametrize("slices_per_patient", [1, 2])
def test_diagnose_end_to_end_on_the_phantom(tmp_path, capsys, slices_per_patient):
    """The report, with the positives per anchor: expected for uniform batches, counted for batches of groups."""
    out = tmp_path / "diag"
    argv = [
        "--config_file",
        str(REPO / "bundles" / "gcl_demo" / "configs" / "pretrain.json"),
        "--output_dir",
        str(out),
        "--iterations",
        "3",
        "--num_patients",
        "6",
        "--num_pretrain",
        "2",
        "--num_val",
        "1",
        "--num_test",
        "1",
        "--image_size",
        "[32,32]",
        "--features",
        "[4,4,8,8,16,4]",
        "--batch_size",
        "4",
        "--epochs",
        "2",
        "--slices_per_patient",
        str(slices_per_patient),
    ]
    assert main(argv) == 0
    rows = list(csv.DictReader(open(out / "trajectory.csv")))
    assert [float(r["iteration"]) for r in rows] == [1.0, 2.0, 3.0]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["labels"]) == {"patient_id", "slice_quantile", "organ_state"}
    assert summary["chance"] == pytest.approx(math.log(7)) and len(summary["pairs"]) == 6
    assert "Verdict" in capsys.readouterr().out and (out / "curves.png").is_file()
    rep = summary["representation"]
    n = rep["num_images"]
    assert n % 4 == 0 and 1 <= rep["rank/img"] <= min(n, rep["dim/img"]) and 1 <= rep["rank/features"] <= 16
    assert 0 <= rep["alignment/img"] <= 4 and -4 <= rep["uniformity/img"] <= 0
    assert "effective rank (RankMe)" in (out / "report.md").read_text()
    positives = summary["positives"]
    assert set(positives) == {"patient_id", "slice_quantile", "organ_state"}
    if slices_per_patient > 1:  # batches of whole pairs of one patient's slices: counted, one at least per anchor
        assert positives["patient_id"]["share"] == 1.0 and positives["patient_id"]["mean"] >= 1.0
    assert all(0 <= p["share"] <= 1 and 0 <= p["mean"] <= 3 for p in positives.values())
    assert "anchors with at least one" in (out / "report.md").read_text()


ACDC = Path(os.environ.get("GCL_DATA_ROOT", REPO.parent / "shared" / "data")) / "acdc"
# a small real-data setting: 12 ACDC pre-training patients, 64 x 64 slices, batch 16, 40 iterations
SMALL_ACDC = [
    "--dataset_dir",
    str(ACDC),
    "--iterations",
    "40",
    "--num_pretrain",
    "12",
    "--image_size",
    "[64,64]",
    "--batch_size",
    "16",
    "--epochs",
    "4",
]


def _diagnose_acdc(tmp_path, *overrides):
    out = tmp_path / "diag"
    config = str(REPO / "bundles" / "gcl_acdc" / "configs" / "pretrain.json")
    main(["--config_file", config, "--output_dir", str(out), *SMALL_ACDC, *overrides])
    return json.loads((out / "summary.json").read_text())


@pytest.mark.realdata
@pytest.mark.skipif(not ACDC.is_dir(), reason="real ACDC data not found (set GCL_DATA_ROOT)")
def test_default_recipe_trains_every_image_wise_loss_on_real_data(tmp_path):
    """Full GCL (three meta labels, pixel branch with GradFilter, GradMitigator) with the bundles' default recipe:
    every image-wise loss ends clearly below chance ln(2B - 1) and the embeddings spread out."""
    summary = _diagnose_acdc(tmp_path)
    assert summary["verdict"] == "training"
    for name, label in summary["labels"].items():
        assert label["img_last"] < summary["chance"] - 0.2, name
        assert not math.isnan(label["pix_last"])  # the pixel branch ran
    assert summary["std_img"][1] > 0.025 and summary["cos_img"][1] < summary["cos_img"][0]
    assert len(summary["pairs"]) == 6


@pytest.mark.realdata
@pytest.mark.skipif(not ACDC.is_dir(), reason="real ACDC data not found (set GCL_DATA_ROOT)")
def test_paper_literal_recipe_stalls_on_real_data(tmp_path):
    """The finding behind the default: Eq. 1 and Algorithm 1 as written stay at chance in the same setting, with
    the image embeddings drifting towards collapse."""
    summary = _diagnose_acdc(tmp_path, "--recipe", "paper")
    assert summary["verdict"] != "training"
    assert not all(label["below_chance"] for label in summary["labels"].values())
    # drifting together: the image embeddings' mean cosine rises (0.92 -> 0.95 here) while their spread shrinks
    assert summary["cos_img"][0] < summary["cos_img"][1] and summary["cos_img"][1] > 0.9
    assert summary["std_img"][1] < summary["std_img"][0]


def test_compare_runs(tmp_path):
    from gcl_monai.diagnose.compare import comparison_table

    ref_rows = [{**r, "img/a": 3.5 - 0.1 * i} for i, r in enumerate(_rows())]
    write_diagnosis(tmp_path / "ref", ref_rows, summarise(ref_rows, ["a"], window_fraction=0.2))
    write_diagnosis(tmp_path / "run", _rows(), summarise(_rows(), ["a", "b"], window_fraction=0.2))
    table = comparison_table([tmp_path / "ref", tmp_path / "run"], reference=tmp_path / "ref").splitlines()
    assert len(table) == 4 and table[2].startswith("| ref | 10 |") and table[3].startswith("| run | 10 |")
    assert "| 0.800 | 1.00x |" in table[2] and "| 0.200 | 0.25x |" in table[3]  # mean drops 0.8 and (0.4 + 0) / 2
    assert table[3].endswith("| stalled at chance: b |") and "b: " in table[3] and "a: 3.475 -> 3.075 ✓" in table[3]
    with pytest.raises(FileNotFoundError, match="missing"):
        comparison_table([tmp_path / "missing"])


def test_label_free_measures_by_hand():
    one_direction = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert embedding_rank(one_direction) == pytest.approx(1.0, abs=1e-5)
    assert embedding_rank(torch.eye(4)) == pytest.approx(4.0, rel=1e-5)
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert alignment(z, z) == 0.0 and alignment(z, -z) == pytest.approx(4.0)
    # two orthogonal unit vectors: squared distance 2, log exp(-2 * 2) = -4; all identical: 0
    assert uniformity(z) == pytest.approx(-4.0) and uniformity(torch.ones(5, 3)) == pytest.approx(0.0)


def test_positives_counted_in_the_samplers_batches():
    """Uniform batches (a shuffled order): the count approaches the hypergeometric figures; batches of two slices of
    one patient (GroupedSampler): every anchor has its group mate, 1 + what the other group brings; torch's random
    state is as before."""
    from gcl_monai.data import GroupedSampler
    from gcl_monai.data.slice_dataset import SliceRecord
    from gcl_monai.diagnose.positives import batch_positives, sampled_positives

    patients = [0, 0, 1, 1, 1, 1, 2, 2]
    table = [SliceRecord(v, 0, p, v % 4, 0) for v, p in enumerate(patients)]

    class Shuffled:
        def __iter__(self):
            return iter(torch.randperm(len(table)).tolist())

    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    uniform = sampled_positives(table, ["patient_id", "organ_state"], 4, Shuffled(), passes=3000)
    assert torch.equal(torch.random.get_rng_state(), state)
    for name, labels in (("patient_id", patients), ("organ_state", [0] * 8)):
        expected = batch_positives(labels, 4)
        assert uniform[name]["mean"] == pytest.approx(expected["mean"], abs=0.02)
        assert uniform[name]["share"] == pytest.approx(expected["share"], abs=0.02)
    grouped = sampled_positives(table, ["patient_id"], 4, GroupedSampler(patients, group_size=2), passes=500)
    # the other group of the batch is patient 1's with probability 1/3 (3 groups besides, one of them patient 1's)
    # for an anchor of patient 1, else 0: mean 1 + 2 * (4/8) * (1/3)
    assert grouped["patient_id"]["share"] == 1.0
    assert grouped["patient_id"]["mean"] == pytest.approx(1 + 2 * 0.5 / 3, abs=0.03)
    assert sampled_positives(table, ["patient_id"], 16, Shuffled()) == {}


def test_positives_per_anchor_by_hand():
    """Labels a a b b b c, batches of 3 (2 other images out of 5): group a finds its other one with probability
    1 - C(4,2)/C(5,2) = 0.4 (mean 2 * 1/5), group b 1 - C(3,2)/C(5,2) = 0.7 (mean 2 * 2/5), c never; averaged over
    the 6 anchors."""
    from gcl_monai.data.slice_dataset import SliceRecord
    from gcl_monai.diagnose.positives import batch_positives, meta_label_positives

    got = batch_positives(list("aabbbc"), 3)
    assert got["mean"] == pytest.approx((2 * 0.4 + 3 * 0.8) / 6)
    assert got["share"] == pytest.approx((2 * 0.4 + 3 * 0.7) / 6)
    with pytest.raises(ValueError, match="batch 7"):
        batch_positives(list("aabbbc"), 7)
    table = [SliceRecord(v, s, p, q, -1) for v, (s, p, q) in enumerate([(0, 0, 0), (1, 0, 1), (0, 1, 0), (1, 1, 1)])]
    positives = meta_label_positives(table, [None, "patient_id", "slice_quantile", "organ_state"], 2)
    # SimCLR (None) has no meta label, organ_state is absent (-1); one other image out of 3, each label pairs two
    assert set(positives) == {"patient_id", "slice_quantile"}
    assert positives["patient_id"] == pytest.approx({"mean": 1 / 3, "share": 1 / 3})
