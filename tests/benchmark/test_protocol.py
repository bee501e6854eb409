"""The pre-registered analysis: difference tables paired by draw and pre-training seed, Holm per family; and the
plan of pre-training seeds."""

import math

import numpy as np
import pytest

from gcl_monai.benchmark.experiment import Experiment
from gcl_monai.benchmark.plan import plan_cells
from gcl_monai.benchmark.presets import get_preset
from gcl_monai.benchmark.protocol import Comparison, analyse, difference_table, write_analysis


def _row(method, draw, dice, pretrain_seed="", num_labeled=2, status="ok"):
    return {
        "method": method,
        "num_labeled": num_labeled,
        "draw": draw,
        "seed": draw,
        "test_set": "test",
        "dice": dice,
        "status": status,
        "pretrain_seed": pretrain_seed,
    }


def test_difference_table_pairs_each_seed_with_the_baseline_of_its_draw():
    rows = [_row("random", d, 0.5 + 0.01 * d) for d in range(3)]
    rows += [_row("gcl", d, 0.6 + 0.01 * d + 0.1 * s, pretrain_seed=s) for s in (0, 1) for d in range(3)]
    table = difference_table(rows, Comparison("gcl", "random", 2))
    np.testing.assert_allclose(table, [[0.1] * 3, [0.2] * 3])


def test_two_pretrained_methods_pair_seed_by_seed_and_incomplete_draws_are_dropped():
    rows = [_row("simclr", d, 0.5, pretrain_seed=s) for s in (0, 1) for d in range(3)]
    rows += [_row("gcl", d, 0.6 + 0.1 * s, pretrain_seed=s) for s in (0, 1) for d in range(3)]
    rows[-1] = {**rows[-1], "status": "failed", "dice": math.nan}  # gcl seed 1, draw 2
    table = difference_table(rows, Comparison("gcl", "simclr", 2))
    np.testing.assert_allclose(table, [[0.1, 0.1], [0.2, 0.2]])


def test_analysis_holm_corrects_within_each_family(tmp_path):
    rng = np.random.default_rng(0)
    rows = [_row("random", d, 0.5 + rng.normal(0, 0.02)) for d in range(8)]
    for s in range(3):
        shift = rng.normal(0, 0.005)
        rows += [
            _row("gcl", d, rows[d]["dice"] + 0.08 + shift + rng.normal(0, 0.01), pretrain_seed=s) for d in range(8)
        ]
        rows += [_row("simclr", d, rows[d]["dice"] + shift + rng.normal(0, 0.01), pretrain_seed=s) for d in range(8)]
    comparisons = [
        Comparison("gcl", "random", 2, "primary"),
        Comparison("gcl", "simclr", 2, "primary"),
        Comparison("simclr", "random", 2),
    ]
    results = analyse(rows, comparisons)
    primary = [r for r in results if r["comparison"].family == "primary"]
    assert all(r["resolved"] for r in primary)
    assert all(r["p_holm"] >= r["difference"].p for r in primary)
    assert results[2]["resolved"] is False and results[2]["p_holm"] == pytest.approx(results[2]["difference"].p)
    csv_path, md_path = write_analysis(results, tmp_path)
    assert "**resolved**" in md_path.read_text() and csv_path.read_text().count("\n") == 4


def test_pretrain_seeds_plan_one_pretraining_and_one_cell_per_seed(tmp_path):
    preset = get_preset("cpu-protocol").replace(num_labeled=(2,), repeats=2)
    experiment = Experiment("p", "demo", preset, results_dir=tmp_path)
    pretrain, finetune = plan_cells(experiment)
    names = sorted(c.name for c in pretrain)
    assert names == sorted(f"{m}{s}" for m in ("gcl", "simclr", "supervised_encoder") for s in ("", "_p1", "_p2"))
    seeded = next(c for c in pretrain if c.name == "gcl_p2")
    assert seeded.overrides["seed"] == 2 and seeded.folder.name == "gcl_p2"
    gcl = [c for c in finetune if c.method == "gcl"]
    assert len(gcl) == 3 * 2 and {c.pretrain_seed for c in gcl} == {0, 1, 2}
    assert {c.train_overrides["pretrained_path"] for c in gcl if c.pretrain_seed == 1} == {
        str(tmp_path / "p" / "pretrain" / "gcl_p1" / "encoder.pt")
    }
    random = [c for c in finetune if c.method == "random"]
    assert len(random) == 2 and all(c.pretrain_seed is None for c in random)
    assert len({c.folder for c in finetune}) == len(finetune)


def test_pretrain_seeds_from_the_command_line():
    from gcl_monai.benchmark.__main__ import preset_from_args, run_parser

    args = run_parser().parse_args(
        [
            "--preset",
            "cpu-protocol",
            "--data",
            "acdc",
            "--methods",
            "random",
            "supervised_encoder",
            "--pretrain-seeds",
            "0",
            "1",
            "1",
        ]
    )
    preset = preset_from_args(args)
    assert preset.pretrain_seeds == (0, 1) and preset.methods == ("random", "supervised_encoder")
    assert preset.name == "cpu-protocol+custom" and preset.common["num_val"] == 12


def test_the_probe_settings_are_not_settings_of_the_training():
    from gcl_monai.benchmark.bundles import default_bundle_dir
    from gcl_monai.benchmark.settings import run_settings

    bundle = default_bundle_dir() / "gcl_acdc"
    plain = run_settings(bundle, "pretrain", {"epochs": 3})
    probed = run_settings(bundle, "pretrain", {"epochs": 3, "probe_interval": 1, "probe_keep_best": True})
    assert plain == probed and not any(k.startswith("probe_") for k in plain)
    assert run_settings(bundle, "pretrain", {"epochs": 4}) != plain
