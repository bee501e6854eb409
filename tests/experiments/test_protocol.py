"""The pre-registered analysis: difference tables paired by draw and pre-training seed, Holm per family; and the
plan of pre-training seeds."""

import csv
import json
import math

import numpy as np
import pytest

from experiments.experiment import Experiment
from experiments.plan import plan_cells
from experiments.presets import get_preset
from experiments.study.protocol import (
    ORIGINAL_PROTOCOL_COMPARISONS,
    PROTOCOL_COMPARISONS,
    REGISTRATIONS,
    REPLICATION_COMPARISONS,
    Comparison,
    Design,
    analyse,
    difference_table,
    protocol_comparisons,
    select_pretrain_seeds,
    write_analysis,
)


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


def _write_experiment(tmp_path, name, seeds, rows, repeats=3):
    """An experiment's folder as the harness leaves it: plan.json (its pre-training seeds and draws), results.csv."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({"preset": {"pretrain_seeds": seeds, "repeats": repeats}}))
    rows = [{**r, "repeat": r["draw"]} for r in rows]
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


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
        Comparison("gcl", "random", 2, "primary", goal=0.05),
        Comparison("gcl", "simclr", 2, "primary", goal=0.02),
        Comparison("simclr", "random", 2),
    ]
    results = analyse(rows, comparisons)
    primary = [r for r in results if r["comparison"].family == "primary"]
    assert all(r["resolved"] and r["direction"] == "above" for r in primary)
    assert all(r["p_holm"] >= r["difference"].p for r in primary)
    assert results[2]["resolved"] is False and results[2]["p_holm"] == pytest.approx(results[2]["difference"].p)
    # gcl − random +0.080 [+0.044, +0.116]: the goal +0.05 inside, open; gcl − simclr +0.078 [+0.047, +0.108]: met
    assert [round(r["difference"].low, 3) for r in primary] == [0.044, 0.047]
    assert [r["goal_reading"] for r in results] == ["open", "met", ""]
    csv_path, md_path = write_analysis(results, tmp_path)
    md = md_path.read_text()
    assert md.count("**resolved above**") == 2 and "| +0.05: open |" in md and "| +0.02: met |" in md
    assert csv_path.read_text().count("\n") == 4
    written = list(csv.DictReader(csv_path.open()))
    assert [(r["goal"], r["goal_reading"], r["direction"]) for r in written] == [
        ("0.05", "open", "above"),
        ("0.02", "met", "above"),
        ("", "", ""),
    ]


def test_a_goal_is_met_excluded_or_open_by_the_interval_and_the_protocol_registers_the_goals():
    """docs/protocol_gpu.md: met when the lower bound is at or above the goal, excluded when the upper bound is below
    it, open otherwise; the protocol's primary comparisons carry the project's goals, the secondary none."""
    from experiments.study.intervals import SeedAwareDifference
    from experiments.study.protocol import GOALS, goal_reading, protocol_comparisons

    def interval(low, high):
        return SeedAwareDifference((low + high) / 2, low, high, 10.0, 0.01, 3, 8, 0.0, 0.0, 0.0)

    assert goal_reading(0.05, interval(0.05, 0.09)) == "met"
    assert goal_reading(0.05, interval(0.049, 0.09)) == "open"
    assert goal_reading(0.05, interval(-0.02, 0.049)) == "excluded"
    assert goal_reading(0.02, interval(-0.03, -0.01)) == "excluded"
    assert goal_reading(None, interval(0.1, 0.2)) == "" and goal_reading(0.05, None) == ""
    nan = float("nan")
    assert goal_reading(0.05, SeedAwareDifference(0.1, nan, nan, nan, nan, 1, 1, 0.0, 0.0, 0.0)) == ""
    for primary_l in (1, 2):
        goals = {(c.method, c.baseline, c.family): c.goal for c in protocol_comparisons(primary_l)}
        assert goals == {
            ("gcl", "random", "primary"): 0.05,
            ("gcl", "simclr", "primary"): 0.02,
            ("supervised_encoder", "random", "secondary"): None,
            ("simclr", "random", "secondary"): None,
        }
    assert GOALS == {("gcl", "random"): 0.05, ("gcl", "simclr"): 0.02}


def test_a_comparison_resolved_below_zero_says_so(tmp_path):
    rows = [_row("random", d, 0.6 + 0.01 * d) for d in range(8)]
    rows += [_row("gcl", d, 0.5 + 0.01 * d + 0.002 * (s - d % 3), pretrain_seed=s) for s in range(3) for d in range(8)]
    (result,) = analyse(rows, [Comparison("gcl", "random", 2, "primary", goal=0.05)])
    assert result["resolved"] and result["direction"] == "below" and result["goal_reading"] == "excluded"
    _, md_path = write_analysis([result], tmp_path)
    assert "**resolved below**" in md_path.read_text()


def _fix_p_values(p_of, monkeypatch):
    """Fixes each comparison's p-value (its method names it) so that Holm's arithmetic can be checked by hand."""
    import experiments.study.protocol as protocol

    real = protocol.seed_aware_difference

    def fixed(table):
        d = real(table)
        return type(d)(**{**d.__dict__, "p": p_of[round(float(np.mean(table)), 6)]})

    monkeypatch.setitem(protocol.SCOPES, "method", fixed)


def test_holm_counts_every_registered_comparison_of_a_family(monkeypatch):
    """Family of three, p = 0.01 and 0.04 measured, the third not run: Holm over m = 3 gives 0.03 and 0.08 (over
    the two measured alone it would give 0.02 and 0.04, both resolved)."""
    rows = [_row("random", d, 0.5) for d in range(4)]
    rows += [_row("gcl", d, 0.6 + 0.01 * (d % 2), pretrain_seed=s) for s in (0, 1) for d in range(4)]
    rows += [_row("simclr", d, 0.7 + 0.01 * (d % 2), pretrain_seed=s) for s in (0, 1) for d in range(4)]
    _fix_p_values({0.105: 0.01, 0.205: 0.04}, monkeypatch)
    comparisons = [
        Comparison("gcl", "random", 2),
        Comparison("simclr", "random", 2),
        Comparison("gcl", "random", 1),  # no L = 1 rows
    ]
    results = analyse(rows, comparisons, Design(seeds=2, draws=4))
    assert [r["p_holm"] for r in results] == pytest.approx([0.03, 0.08, 1.0])
    assert [r["resolved"] for r in results] == [True, False, False]
    assert results[2]["missing"] == "no pairs" and results[0]["missing"] == ""


def test_an_incomplete_comparison_is_never_resolved(tmp_path):
    """A clear difference over 2 of 3 seeds and 8 draws: its interval is reported, marked incomplete, not resolved."""
    rows = [_row("random", d, 0.5 + 0.01 * d) for d in range(8)]
    rows += [_row("gcl", d, 0.7 + 0.01 * d + 0.001 * s * d, pretrain_seed=s) for s in (0, 1) for d in range(8)]
    (result,) = analyse(rows, [Comparison("gcl", "random", 2, "primary")], Design(seeds=3, draws=8))
    assert result["difference"].low > 0.15 and result["difference"].p < 0.01  # complete, it would be resolved
    assert result["p_holm"] == 1.0
    assert result["missing"] == "incomplete: S = 2 of 3, D = 8 of 8" and result["resolved"] is False
    _, md = write_analysis([result], tmp_path)
    assert "incomplete: S = 2 of 3" in md.read_text() and "**resolved**" not in md.read_text()


def test_the_encoder_scope_analyses_one_seed_per_method_over_its_draws(tmp_path):
    """One pre-training seed, 3 draws: gcl − random = 0.1, 0.2, 0.3 (p = 0.0742 by hand), alone in the primary
    family, so its Holm p is its own p; the method scope gives no interval for it; a design of two seeds is refused
    by the encoder scope."""
    rows = [_row("random", d, 0.5) for d in range(3)]
    rows += [_row("gcl", d, 0.6 + 0.1 * d) for d in range(3)]
    comparison = [Comparison("gcl", "random", 2, "primary")]
    (result,) = analyse(rows, comparison, Design(seeds=1, draws=3), scope="encoder")
    assert result["difference"].mean == pytest.approx(0.2) and result["p_holm"] == pytest.approx(0.07418, abs=1e-4)
    assert result["missing"] == "" and result["resolved"] is False
    (method,) = analyse(rows, comparison, Design(seeds=1, draws=3))
    assert np.isnan(method["difference"].low) and method["p_holm"] == 1.0
    with pytest.raises(ValueError, match="one pre-training seed"):
        analyse(rows, comparison, Design(seeds=2, draws=3), scope="encoder")
    csv_path, md = write_analysis([result], tmp_path, scope="encoder")
    assert csv_path.name == "encoder_analysis.csv" and "not the methods" in md.read_text()


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
    from experiments.__main__ import preset_from_args, run_parser

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
    from experiments.bundles import default_bundle_dir
    from experiments.settings import run_settings

    bundle = default_bundle_dir() / "gcl_acdc"
    plain = run_settings(bundle, "pretrain", {"epochs": 3})
    probed = run_settings(bundle, "pretrain", {"epochs": 3, "probe_interval": 1, "probe_keep_best": True})
    assert plain == probed and not any(k.startswith("probe_") for k in plain)
    assert run_settings(bundle, "pretrain", {"epochs": 4}) != plain


def test_the_protocol_command_reads_the_design_from_the_experiments_plan(tmp_path, capsys):
    """An experiment of 2 pre-training seeds x 3 draws at L = 2 only: its L = 2 comparisons are complete (the control
    has no pairs), the files are written beside results.csv; registered with L = 1 primary, nothing pairs."""
    from experiments.__main__ import main

    rows = [_row("random", d, 0.5 + 0.01 * d) for d in range(3)]
    rows += [
        _row(m, d, 0.6 + 0.01 * d + 0.01 * s, pretrain_seed=s)
        for m in ("gcl", "simclr")
        for s in (0, 1)
        for d in range(3)
    ]
    folder = _write_experiment(tmp_path, "e", [0, 1], rows)
    assert main(["protocol", "--name", "e", "--results-dir", str(tmp_path)]) == 0
    analysis = {
        (r["method"], r["baseline"], r["num_labeled"]): r
        for r in csv.DictReader(open(folder / "protocol_analysis.csv"))
    }
    assert analysis[("gcl", "random", "2")]["missing"] == ""
    assert analysis[("supervised_encoder", "random", "2")]["missing"] == "no pairs"
    assert "no pairs" in capsys.readouterr().out
    # amendment 5: L = 1 is registered only as the primary L (protocol-L1), where these rows have no pairs
    assert not any(key[2] == "1" for key in analysis)
    assert main(["protocol", "--name", "e", "--results-dir", str(tmp_path), "--registration", "protocol-L1"]) == 0
    rows = list(csv.DictReader(open(folder / "protocol_analysis.csv")))
    assert {(r["num_labeled"], r["family"], r["missing"]) for r in rows} == {
        ("1", "primary", "no pairs"),
        ("1", "secondary", "no pairs"),
    }


def test_the_protocol_command_joins_the_experiments_of_further_pretraining_seeds(tmp_path):
    """Seed 0's experiment (random and GCL) and seed 1's (GCL only, gpu-run --pretrain-seed 1) on the same 3 draws:
    joined, GCL − random has S = 2 x D = 3 and is complete; an experiment joined to itself is refused."""
    from experiments.__main__ import main

    first = _write_experiment(
        tmp_path, "s0", [0], [_row("random", d, 0.5) for d in range(3)] + [_row("gcl", d, 0.6, 0) for d in range(3)]
    )
    _write_experiment(tmp_path, "s1", [1], [_row("gcl", d, 0.62 + 0.01 * d, 1) for d in range(3)])
    assert main(["protocol", "--name", "s0", "--with", "s1", "--results-dir", str(tmp_path)]) == 0
    analysis = {
        (r["method"], r["baseline"], r["num_labeled"]): r for r in csv.DictReader(open(first / "protocol_analysis.csv"))
    }
    gcl = analysis[("gcl", "random", "2")]
    assert (gcl["seeds"], gcl["draws"], gcl["missing"]) == ("2", "3", "")
    assert float(gcl["mean"]) == pytest.approx((0.1 * 3 + 0.12 + 0.13 + 0.14) / 6)
    with pytest.raises(SystemExit):
        main(["protocol", "--name", "s0", "--with", "s0", "--results-dir", str(tmp_path)])


def test_select_pretrain_seeds_keeps_the_chosen_seeds_and_the_cells_without_one():
    rows = [_row("random", 0, 0.5)] + [_row("gcl", 0, 0.6 + s, pretrain_seed=s) for s in (0, 1, 2)]
    rows.append(_row("gcl", 1, 0.7, pretrain_seed="1"))  # as read from a CSV
    kept = select_pretrain_seeds(rows, [1, 2])
    assert [(r["method"], r["pretrain_seed"]) for r in kept] == [("random", ""), ("gcl", 1), ("gcl", 2), ("gcl", "1")]


def test_the_gpu_replication_analyses_the_new_seeds_without_the_control(tmp_path):
    """docs/protocol_gpu.md: seed 0's experiment (random, GCL, SimCLR) joined with seeds 1 and 2 (GCL, SimCLR);
    --pretrain-seeds 1 2 leaves seed 0's cells out (S = 2 x D = 3, its mean by hand), the registration has no
    positive control, and the analysis goes to --out-dir; a seed no experiment ran is refused."""
    from experiments.__main__ import main

    def pretrained(seed, gcl):  # GCL at 0.5 + gcl + 0.01 d, SimCLR at 0.5 + 0.01 d
        return [_row("gcl", d, 0.5 + gcl + 0.01 * d, seed) for d in range(3)] + [
            _row("simclr", d, 0.5 + 0.01 * d, seed) for d in range(3)
        ]

    _write_experiment(tmp_path, "s0", [0], [_row("random", d, 0.5 + 0.02 * d) for d in range(3)] + pretrained(0, 0.3))
    _write_experiment(tmp_path, "s1", [1], pretrained(1, 0.05))
    _write_experiment(tmp_path, "s2", [2], pretrained(2, 0.07))
    out = tmp_path / "replication"
    argv = ["protocol", "--name", "s0", "--with", "s1", "s2", "--results-dir", str(tmp_path)]
    assert main([*argv, "--pretrain-seeds", "1", "2", "--registration", "gpu-replication", "--out-dir", str(out)]) == 0
    analysis = {
        (r["method"], r["baseline"], r["num_labeled"]): r for r in csv.DictReader(open(out / "protocol_analysis.csv"))
    }
    assert not any("supervised_encoder" in key for key in analysis)
    gcl = analysis[("gcl", "random", "2")]
    # seed s, draw d: (0.5 + g_s + 0.01 d) - (0.5 + 0.02 d) = g_s - 0.01 d
    assert (gcl["seeds"], gcl["draws"], gcl["missing"]) == ("2", "3", "")
    assert float(gcl["mean"]) == pytest.approx((0.05 + 0.07) / 2 - 0.01)
    assert float(analysis[("gcl", "simclr", "2")]["mean"]) == pytest.approx(0.06)
    assert "docs/protocol_gpu.md" in (out / "protocol_analysis.md").read_text()
    assert not (tmp_path / "s0" / "protocol_analysis.csv").exists()
    with pytest.raises(SystemExit):
        main([*argv, "--pretrain-seeds", "3"])


def test_the_converged_analysis_reads_the_rows_scored_on_the_original_labels(tmp_path):
    """docs/protocol_converged.md (amendment 4), as its one analysis runs: the preset's design (3 pre-training seeds
    x 8 draws at L = 2), ``--registration converged --test-set test_input``. Only the ``test_input`` rows are read
    (the network-grid ``test`` rows beside them are 0.9 for every cell and would make every difference 0), the four
    comparisons are complete, their means as computed by hand, and the files are named for the rows they read."""
    from experiments.__main__ import main

    def rows_of(test_set, score):
        return [{**_row("random", d, score(0.5 + 0.01 * d)), "test_set": test_set} for d in range(8)] + [
            {**_row(m, d, score(0.5 + lift + 0.01 * d + 0.01 * s), pretrain_seed=s), "test_set": test_set}
            for m, lift in (("gcl", 0.05), ("simclr", 0.03), ("supervised_encoder", 0.08))
            for s in (0, 1, 2)
            for d in range(8)
        ]

    rows = rows_of("test_input", lambda dice: dice) + rows_of("test", lambda dice: 0.9)
    folder = _write_experiment(tmp_path, "converged", [0, 1, 2], rows, repeats=8)
    argv = ["protocol", "--name", "converged", "--results-dir", str(tmp_path)]
    assert main([*argv, "--registration", "converged", "--test-set", "test_input"]) == 0
    analysis = {
        (r["method"], r["baseline"], r["num_labeled"]): r
        for r in csv.DictReader(open(folder / "protocol_analysis_test_input.csv"))
    }
    assert set(analysis) == {
        ("gcl", "random", "2"),
        ("gcl", "simclr", "2"),
        ("supervised_encoder", "random", "2"),
        ("simclr", "random", "2"),
    }
    assert all((r["seeds"], r["draws"], r["missing"]) == ("3", "8", "") for r in analysis.values())
    # seed s, draw d: (0.5 + lift + 0.01 d + 0.01 s) - (0.5 + 0.01 d) = lift + 0.01 s, the seeds' mean lift + 0.01
    assert float(analysis[("gcl", "random", "2")]["mean"]) == pytest.approx(0.06)
    assert float(analysis[("gcl", "simclr", "2")]["mean"]) == pytest.approx(0.02)
    assert float(analysis[("supervised_encoder", "random", "2")]["mean"]) == pytest.approx(0.09)
    assert float(analysis[("simclr", "random", "2")]["mean"]) == pytest.approx(0.04)
    text = (folder / "protocol_analysis_test_input.md").read_text()
    assert "docs/protocol_converged.md" in text and "`test_input` rows" in text
    assert not (folder / "protocol_analysis.csv").exists()


def _restored_experiment(tmp_path, restored_draws, finished_before):
    """docs/protocol_converged.md's design (3 seeds x 8 draws at L = 2, ``test_input`` rows) whose pre-training
    ``gcl_p2`` was restored from its card when ``finished_before`` (cell names) had finished; its cells on
    ``restored_draws`` score 0.04 more (the restored encoder's), every other lift as in the registered test above."""
    from experiments.gpu_session.kept_encoders import RESTORED_KEY
    from experiments.status import write_status

    def cell(method, d, s):
        suffix = f"_p{s}" if s else ""
        return {
            "run_dir": f"/machine/results/converged/finetune/{method}_L2_d{d}_s{d}{suffix}",
            "test_set": "test_input",
        }

    rows = [{**_row("random", d, 0.5 + 0.01 * d), **cell("random", d, 0)} for d in range(8)]
    for m, lift in (("gcl", 0.05), ("simclr", 0.03), ("supervised_encoder", 0.08)):
        for s in (0, 1, 2):
            for d in range(8):
                extra = 0.04 if (m, s) == ("gcl", 2) and d in restored_draws else 0.0
                rows.append({**_row(m, d, 0.5 + lift + 0.01 * d + 0.01 * s + extra, pretrain_seed=s), **cell(m, d, s)})
    folder = _write_experiment(tmp_path, "converged", [0, 1, 2], rows, repeats=8)
    for name in ("gcl", "gcl_p1", "gcl_p2"):
        (folder / "pretrain" / name).mkdir(parents=True)
        status = {"status": "finished", "encoder_sha256": "a" * 64}
        if name == "gcl_p2":
            status[RESTORED_KEY] = {"card": "gcl_p2.json", "cells_finished": finished_before}
        write_status(folder / "pretrain" / name, status)
    return folder


def test_the_report_names_the_cells_of_a_restored_encoder_and_analyses_without_them(tmp_path, capsys):
    """Amendment 5 of docs/protocol_converged.md: gcl_p2 restored on a new machine after its draws 0-3 finished; its
    draws 4-7 ran from the restored encoder (scored 0.04 higher here). The registered analysis is unchanged and names
    those four cells; the sensitivity analysis gives the primary comparisons without them, over draws 0-3 (a draw
    enters only where every seed has it), by hand: GCL - random 0.05 + 0.01 x mean seed = 0.06, GCL - SimCLR 0.02."""
    from experiments.__main__ import main

    finished_before = [f"gcl_L2_d{d}_s{d}_p2" for d in range(4)] + ["random_L2_d0_s0", "simclr_L2_d0_s0"]
    folder = _restored_experiment(tmp_path, range(4, 8), finished_before)
    argv = ["protocol", "--name", "converged", "--results-dir", str(tmp_path), "--registration", "converged"]
    assert main([*argv, "--test-set", "test_input"]) == 0
    analysis = {
        (r["method"], r["baseline"]): r for r in csv.DictReader(open(folder / "protocol_analysis_test_input.csv"))
    }
    # the registered analysis keeps every cell: 0.06 + 0.04 x 4 / 24 and 0.02 + 0.04 x 4 / 24
    assert float(analysis[("gcl", "random")]["mean"]) == pytest.approx(0.06 + 0.04 / 6)
    assert float(analysis[("gcl", "simclr")]["mean"]) == pytest.approx(0.02 + 0.04 / 6)
    named = ", ".join(f"gcl_L2_d{d}_s{d}_p2" for d in range(4, 8))
    report = (folder / "protocol_analysis_test_input.md").read_text()
    assert f"`gcl_p2`: {named}. Pre-trainings whose cells include both kinds: `gcl_p2`." in report

    sensitivity = list(csv.DictReader(open(folder / "protocol_analysis_test_input_without_restored.csv")))
    assert [(r["method"], r["baseline"]) for r in sensitivity] == [("gcl", "random"), ("gcl", "simclr")]
    assert [float(r["mean"]) for r in sensitivity] == pytest.approx([0.06, 0.02])
    assert all(
        (r["seeds"], r["draws"], r["missing"]) == ("3", "4", "incomplete: S = 3 of 3, D = 4 of 8") for r in sensitivity
    )
    text = (folder / "protocol_analysis_test_input_without_restored.md").read_text()
    assert "Not a further test" in text and named in text and "Holm" not in text and "resolved" not in text
    assert "without the cells fine-tuned from a restored encoder" in capsys.readouterr().out


def test_a_pretraining_whose_cells_all_ran_from_its_restored_encoder_is_named_without_a_sensitivity_analysis(
    tmp_path,
):
    """Restored before any of its cells finished: every gcl_p2 cell loaded the restored encoder, so they are named,
    but no pre-training's cells are mixed and there is nothing to leave out against (amendment 5)."""
    from experiments.__main__ import main

    folder = _restored_experiment(tmp_path, range(8), ["random_L2_d0_s0"])
    argv = ["protocol", "--name", "converged", "--results-dir", str(tmp_path), "--registration", "converged"]
    assert main([*argv, "--test-set", "test_input"]) == 0
    report = (folder / "protocol_analysis_test_input.md").read_text()
    assert "both kinds: none." in report and "gcl_L2_d0_s0_p2, gcl_L2_d1_s1_p2" in report
    assert not (folder / "protocol_analysis_test_input_without_restored.csv").exists()


def test_a_restored_pretraining_of_a_seed_left_out_is_not_named(tmp_path):
    """--pretrain-seeds 0 1 leaves out gcl_p2, the one restored pre-training: the report names no restored cell and
    writes no sensitivity analysis; --pretrain-seeds 1 2 keeps it and names its four cells."""
    from experiments.__main__ import main

    finished_before = [f"gcl_L2_d{d}_s{d}_p2" for d in range(4)]
    folder = _restored_experiment(tmp_path, range(4, 8), finished_before)
    argv = ["protocol", "--name", "converged", "--results-dir", str(tmp_path), "--registration", "converged"]
    argv += ["--test-set", "test_input"]
    assert main([*argv, "--pretrain-seeds", "0", "1", "--out-dir", str(tmp_path / "s01")]) == 0
    assert "restored" not in (tmp_path / "s01" / "protocol_analysis_test_input.md").read_text()
    assert not (tmp_path / "s01" / "protocol_analysis_test_input_without_restored.csv").exists()
    assert main([*argv, "--pretrain-seeds", "1", "2", "--out-dir", str(tmp_path / "s12")]) == 0
    named = ", ".join(f"gcl_L2_d{d}_s{d}_p2" for d in range(4, 8))
    assert f"`gcl_p2`: {named}." in (tmp_path / "s12" / "protocol_analysis_test_input.md").read_text()
    assert (tmp_path / "s12" / "protocol_analysis_test_input_without_restored.csv").exists()
    assert not (folder / "protocol_analysis_test_input.md").exists()


def test_an_analysis_without_a_restore_says_nothing_of_one(tmp_path):
    """No pre-training restored (rows without run_dir, as the harness wrote before it existed): no paragraph."""
    from experiments.report import read_results
    from experiments.study.restored import RestoredCells, restored_cells

    folder = _write_experiment(tmp_path, "plain", [0], [_row("random", 0, 0.5), _row("gcl", 0, 0.6, pretrain_seed=0)])
    (folder / "pretrain" / "gcl").mkdir(parents=True)
    (folder / "pretrain" / "gcl" / "benchmark.json").write_text(json.dumps({"status": "finished"}))
    assert restored_cells({folder: read_results(folder / "results.csv")}) == RestoredCells(cells={}, mixed=())
    assert RestoredCells(cells={}, mixed=()).lines() == []


def test_the_amended_protocol_registers_one_l_and_the_replication_keeps_both():
    """docs/protocol.md amendment 5: two primary and two secondary comparisons at the primary L; docs/protocol_gpu.md
    (registered before the amendment, on other runs) keeps its six, at L = 2 and 1, without the control."""
    assert [(c.method, c.baseline, c.num_labeled, c.family) for c in protocol_comparisons(1)] == [
        ("gcl", "random", 1, "primary"),
        ("gcl", "simclr", 1, "primary"),
        ("supervised_encoder", "random", 1, "secondary"),
        ("simclr", "random", 1, "secondary"),
    ]
    assert PROTOCOL_COMPARISONS == protocol_comparisons(2)
    # as first registered (the analyses made before the amendment are reproduced with it): eight, at L = 2 and 1
    assert len(ORIGINAL_PROTOCOL_COMPARISONS) == 8 and ORIGINAL_PROTOCOL_COMPARISONS[:4] == PROTOCOL_COMPARISONS
    assert set(REPLICATION_COMPARISONS) < set(ORIGINAL_PROTOCOL_COMPARISONS)
    assert {c.num_labeled for c in REPLICATION_COMPARISONS} == {1, 2} and len(REPLICATION_COMPARISONS) == 6
    assert not any("supervised_encoder" in (c.method, c.baseline) for c in REPLICATION_COMPARISONS)


def test_every_registration_names_a_document_of_the_repository():
    """Each registered analysis cites the document that registers it; docs/protocol_gpu_seeds.md (seeds 3 to 14)
    registers protocol_gpu.md's comparisons unchanged."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for name, registration in REGISTRATIONS.items():
        document = registration.document.split(",")[0].removesuffix(" as first registered")
        assert (root / document).is_file(), (name, document)
    assert REGISTRATIONS["gpu-seeds"].comparisons == REGISTRATIONS["gpu-replication"].comparisons


def test_the_converged_preset_is_the_protocols_design_with_the_few_label_recipe(tmp_path):
    """docs/protocol_converged.md, amendment 4: cpu-protocol's methods, seeds, draws, split and pre-training at L = 2,
    fine-tuned as ``recipes/finetune_fewlabel.json`` says (the same budget, validation interval, batch, learning
    rate and export, in 50-iteration epochs), the export reaching every evaluation, the original-label test set
    planned with ``input_grid``: 8 x (1 + 3 x 3) = 80 fine-tuning cells."""
    from experiments.bundles import default_bundle_dir

    protocol, converged = get_preset("cpu-protocol"), get_preset("cpu-converged")
    same = ("methods", "repeats", "pretrain_seeds", "pretrain", "common")
    assert all(getattr(converged, f) == getattr(protocol, f) for f in same) and converged.num_labeled == (2,)
    recipe = json.loads((default_bundle_dir() / "gcl_acdc/configs/recipes/finetune_fewlabel.json").read_text())
    tuned = converged.finetune
    per_epoch, recipe_per_epoch = tuned["iterations_per_epoch"], recipe["iterations_per_epoch"]
    assert tuned["epochs"] * per_epoch == recipe["epochs"] * recipe_per_epoch == 1500
    assert tuned["val_interval"] * per_epoch == recipe["val_interval"] * recipe_per_epoch == 250
    assert all(tuned[k] == recipe[k] for k in ("batch_size", "lr", "pred_interp", "mirror_axes"))
    assert tuned["labeled_pool"] == "train+pretrain" and tuned["channels_last"] is True

    experiment = Experiment("c", "acdc", converged, results_dir=tmp_path, input_grid=True)
    _, finetune = plan_cells(experiment)
    assert len(finetune) == 80 and {c.num_labeled for c in finetune} == {2}
    cell = next(c for c in finetune if c.method == "gcl" and c.pretrain_seed == 2)
    assert cell.train_overrides["batch_size"] == 20 and cell.train_overrides["epochs"] == 30
    assert set(cell.eval_overrides) == {"test", "test_input", "val_input"}
    for evaluation in cell.eval_overrides.values():
        assert evaluation["pred_interp"] == "bilinear" and evaluation["mirror_axes"] == []
    assert cell.eval_overrides["test_input"]["dice_grid"] == "input"


def test_the_prostate_preset_keeps_the_design_and_changes_the_split():
    """docs/protocol_prostate.md: the 31 cases as 13 pre-training + 4 pool + 6 validation + 8 test; methods, seeds,
    draws and fine-tuning as the ACDC protocol's."""
    acdc, prostate = get_preset("cpu-protocol"), get_preset("cpu-protocol-prostate")
    split = {k: prostate.common[k] for k in ("num_pretrain", "num_val", "num_test")}
    assert split == {"num_pretrain": 13, "num_val": 6, "num_test": 8} and 31 - sum(split.values()) == 4
    same = ("methods", "num_labeled", "repeats", "pretrain_seeds", "pretrain", "finetune")
    assert all(getattr(prostate, f) == getattr(acdc, f) for f in same)
    assert {k: v for k, v in prostate.common.items() if k not in split} == {
        k: v for k, v in acdc.common.items() if k not in split
    }


def test_stage_b_rule_reads_the_controls_row_of_the_validation_analysis(tmp_path):
    """`control-resolved`: a complete interval above 0 exits 0; one touching 0 or incomplete 1; no row 2."""
    from experiments.__main__ import main
    from experiments.study.protocol import control_resolved

    path = tmp_path / "protocol_analysis_val.csv"
    path.write_text(
        "method,baseline,num_labeled,low,missing\n"
        "supervised_encoder,random,2,0.064,\n"
        "supervised_encoder,random,1,0.0,\n"
        "supervised_encoder,simclr,3,0.2,\n"
        "supervised_encoder,random,3,0.2,draws 7 of 8\n"
    )
    assert control_resolved(path, 2) and not control_resolved(path, 1) and not control_resolved(path, 3)
    assert main(["control-resolved", str(path), "2"]) == 0 and main(["control-resolved", str(path), "1"]) == 1
    with pytest.raises(SystemExit) as stop:
        main(["control-resolved", str(path), "8"])
    assert stop.value.code == 2
