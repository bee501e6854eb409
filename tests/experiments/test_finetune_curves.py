"""The learning-curve driver's folds (stratified, disjoint, the test split untouched) and its variants table."""

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.finetune_curves import (
    FIELDS,
    GATES,
    check_same_command,
    collect,
    curves_figure,
    fold_split,
    labelled_draws,
    main,
    mean_curves,
    read_curves,
    times,
    validation_curve,
)

REPO = Path(__file__).resolve().parents[2]


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


def _curves(out, runs):
    out.mkdir()
    with (out / "curves.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        for (recipe, labeled), dice in runs.items():
            for i, d in reversed(list(enumerate(dice, 1))):  # rows in any order
                row = {"fold": 0, "recipe": recipe, "labeled": labeled, "draw": 0, "seed": 0}
                writer.writerow({**row, "iteration": 500 * i, "val_dice": d, "finetune_iterations": 500 * len(dice)})


def test_curves_of_several_rounds_are_read_per_run_in_iteration_order_and_plotted(tmp_path):
    from PIL import Image

    _curves(tmp_path / "r1_acdc", {("defaults", "full"): [0.7, 0.8, 0.85], ("defaults", "2"): [0.4, 0.5]})
    _curves(tmp_path / "r2_acdc", {("width512", "full"): [0.75, 0.88]})

    curves = read_curves([tmp_path / "r1_acdc", tmp_path / "r2_acdc"])

    assert curves == {
        ("r1_acdc", "full", "f0 defaults L=full d0 s0 (1500 it.)"): [(500, 0.7), (1000, 0.8), (1500, 0.85)],
        ("r1_acdc", "2", "f0 defaults L=2 d0 s0 (1000 it.)"): [(500, 0.4), (1000, 0.5)],
        ("r2_acdc", "full", "f0 width512 L=full d0 s0 (1000 it.)"): [(500, 0.75), (1000, 0.88)],
    }
    figure = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path / "r1_acdc"), str(tmp_path / "r2_acdc"), "--to", str(figure)]) == 0
    with Image.open(figure) as image:
        assert image.size == (1200, 450)
    # rounds of full supervision alone: one panel, no empty few-label axes
    assert main(["plot", str(tmp_path / "r2_acdc"), "--to", str(figure)]) == 0
    with Image.open(figure) as image:
        assert image.size == (600, 450)
    # a panel per L, each with its own gate
    _curves(
        tmp_path / "r3_acdc", {("fewlabel", "1"): [0.3, 0.4], ("fewlabel", "2"): [0.5, 0.6], ("fewlabel", "8"): [0.7]}
    )
    assert main(["plot", str(tmp_path / "r3_acdc"), str(tmp_path / "r2_acdc"), "--to", str(figure)]) == 0
    with Image.open(figure) as image:
        assert image.size == (2400, 450)
    labelled = [labeled for _, labeled, _ in read_curves([tmp_path / "r3_acdc", tmp_path / "r2_acdc"])]
    assert labelled == ["1", "2", "8", "full"]
    assert [GATES["acdc"].get(labeled) for labeled in labelled] == [0.60, 0.68, None, 0.90]


def _gate_lines(fig):
    """{panel title: the y of its dashed gate line}: the horizontal lines drawn on each panel."""
    return {
        ax.get_title(): [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
        for ax in fig.axes
    }


def test_each_dataset_gets_its_own_gates_named_or_read_from_the_folders(tmp_path):
    runs = {("fullsup", "full"): [0.6, 0.7], ("fewlabel", "1"): [0.3, 0.4], ("fewlabel", "2"): [0.4, 0.5]}
    _curves(tmp_path / "gate_prostate", runs)
    _curves(tmp_path / "gate_acdc", runs)
    _curves(tmp_path / "round", runs)
    full, one, two = (
        f"{t}: validation Dice in training" for t in ("full supervision", "L = 1, random init.", "L = 2, random init.")
    )

    # the paper's prostate rows (Table 1 random: 0.477 / 0.547; Table 3 full supervision 0.703 -> issue 53's 0.70)
    assert _gate_lines(curves_figure([tmp_path / "gate_prostate"])) == {full: [0.70], one: [0.477], two: [0.547]}
    assert _gate_lines(curves_figure([tmp_path / "gate_acdc"])) == {full: [0.90], one: [0.60], two: [0.68]}
    # a folder that names no dataset is drawn with the dataset given, never with another's gates by default
    assert _gate_lines(curves_figure([tmp_path / "round"], "prostate"))[two] == [0.547]
    with pytest.raises(ValueError, match="round"):
        curves_figure([tmp_path / "round"])
    with pytest.raises(ValueError, match="gate_acdc"):
        curves_figure([tmp_path / "gate_prostate", tmp_path / "gate_acdc"])
    figure = tmp_path / "curves.png"
    assert main(["plot", str(tmp_path / "round"), "--dataset", "prostate", "--to", str(figure)]) == 0
    assert figure.stat().st_size > 0


def test_mean_curves_average_each_validation_over_a_sets_runs_and_count_where_each_run_peaks(tmp_path, capsys):
    out = tmp_path / "gate_acdc"
    _curves(out, {("a", "2"): [0.4, 0.6, 0.5], ("b", "2"): [0.5, 0.5, 0.7], ("a", "1"): [0.2, 0.3]})

    summary = mean_curves(out)

    assert summary["2"]["mean"] == {500: (pytest.approx(0.45), 2), 1000: (pytest.approx(0.55), 2), 1500: (0.6, 2)}
    assert summary["2"]["best_at"] == {1000: 1, 1500: 1}
    assert summary["1"] == {"mean": {500: (0.2, 1), 1000: (0.3, 1)}, "best_at": {1000: 1}}
    assert main(["means", str(out)]) == 0
    assert (
        "L = 2: mean validation Dice (runs) at 500: 0.450 (2), 1000: 0.550 (2), 1500: 0.600 (2); "
        "best validation at 1000: 1, 1500: 1" in capsys.readouterr().out
    )


def test_subcommands_answer_help_instead_of_reading_it_as_a_folder(capsys):
    for command in ("collect", "times", "plot", "means", "draws"):
        with pytest.raises(SystemExit) as stop:
            main([command, "--help"])
        assert stop.value.code == 0
        assert f"finetune_curves {command}" in capsys.readouterr().out


def test_a_resumed_runs_log_gives_each_validation_once_with_its_later_value():
    line = "2026-11-28 12:00:00,000 - INFO - Epoch[{}] Metrics -- val_mean_dice: {} \n"
    log = "".join(line.format(e, d) for e, d in ((1, "0.5"), (2, "0.6"), (2, "0.61"), (3, "0.7")))
    assert validation_curve(log) == [(1, "0.5"), (2, "0.61"), (3, "0.7")]


def _epoch_line(engine, epoch, taken):
    stamp = "2026-11-29 04:30:00,000"
    return f"{stamp} - ignite.engine.engine.{engine} - INFO - Epoch[{epoch}] Complete. Time taken: {taken}\n"


def test_epoch_times_are_read_from_the_log_without_their_validation(tmp_path):
    run = tmp_path / "runs" / "f0_batch20_Lfull_d0_s0"
    run.mkdir(parents=True)
    (run / "command.json").write_text(json.dumps(["run", "--iterations_per_epoch", "500", "--epochs", "3"]))
    log = _epoch_line("SupervisedEvaluator", 1, "00:00:30.000") + _epoch_line("SupervisedTrainer", 1, "00:25:30.000")
    log += _epoch_line("SupervisedEvaluator", 1, "00:00:31.500") + "...killed before the checkpoint, resumed\n"
    log += "2026-11-29 05:00:00,000 - INFO - Epoch: 2/3, Iter: 25/500 -- train_loss: 1.0\n"
    log += _epoch_line("SupervisedEvaluator", 1, "00:00:29.000") + _epoch_line("SupervisedTrainer", 2, "00:25:29.000")
    log += _epoch_line("SupervisedTrainer", 3, "01:00:00.500")  # an epoch whose validation did not log
    (run / "log.txt").write_text(log)
    rows = list(csv.DictReader(times(tmp_path).open()))
    # epoch 1: (1530 - 30) / 500 = 3.0 s per iteration; epoch 2 once, with its second validation (29 s); epoch 3:
    # 3600.5 s, nothing to take away
    assert [(r["epoch"], r["seconds"], r["validation_seconds"], r["seconds_per_iteration"]) for r in rows] == [
        ("1", "1530.0", "30.0", "3.0"), ("2", "1529.0", "29.0", "3.0"), ("3", "3600.5", "0.0", "7.201")
    ]  # fmt: skip
    assert {r["run"] for r in rows} == {"f0_batch20_Lfull_d0_s0"} and rows[0]["iterations"] == "500"


def test_resuming_a_run_folder_of_another_command_is_refused(tmp_path):
    (tmp_path / "model").mkdir()
    check_same_command(tmp_path, ["run", "--lr", "0.001"])  # no checkpoint yet: anything goes
    (tmp_path / "command.json").write_text(json.dumps(["run", "--lr", "0.001"]))
    (tmp_path / "model" / "checkpoint_epoch=2.pt").write_bytes(b"")
    check_same_command(tmp_path, ["run", "--lr", "0.001"])
    with pytest.raises(SystemExit, match="holds checkpoints of another command"):
        check_same_command(tmp_path, ["run", "--lr", "0.01"])


def _fake_bundle_run(validated_epochs):
    """A stand-in for ``python -m monai.bundle run``: records the command, logs a validation at each given epoch."""
    calls = []

    def call(command, stdout, stderr, cwd):
        calls.append(command)
        for epoch in validated_epochs:
            stdout.write(f"Epoch[{epoch}] Metrics -- val_mean_dice: 0.{epoch:04d}\n")
        return 0

    return calls, call


@pytest.mark.parametrize(
    ("extra", "epochs", "per_epoch", "val_interval", "validated"),
    [([], "4", "250", "1", [1, 2, 3, 4]), (["--checkpoint-every", "50"], "20", "50", "5", [5, 10, 15, 20])],
)
def test_checkpoints_between_validations_keep_the_validations_and_their_iterations(
    tmp_path, monkeypatch, extra, epochs, per_epoch, val_interval, validated
):
    calls, call = _fake_bundle_run(validated)
    monkeypatch.setattr("benchmarks.finetune_curves.subprocess.call", call)
    args = ["--data-root", str(tmp_path), "--out", str(tmp_path / "out"), "--fold", "0", "--recipe", "r"]
    main([*args, "--iterations", "1000", "--val-every", "250", *extra])
    (command,) = calls
    assert command[command.index("--epochs") + 1] == epochs
    assert command[command.index("--iterations_per_epoch") + 1] == per_epoch
    assert command[command.index("--val_interval") + 1] == val_interval
    with (tmp_path / "out" / "curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [250, 500, 750, 1000]
    assert [r["val_dice"] for r in rows] == [f"0.{e:04d}" for e in validated]


def test_a_checkpoint_interval_that_does_not_divide_the_validation_interval_is_refused(tmp_path):
    args = ["--data-root", str(tmp_path), "--out", str(tmp_path), "--fold", "0", "--recipe", "r"]
    with pytest.raises(SystemExit, match="--checkpoint-every 300 does not divide --val-every 250"):
        main([*args, "--iterations", "1000", "--val-every", "250", "--checkpoint-every", "300"])


def test_labelled_draws_are_each_folds_pool_drawn_as_the_bundle_draws_it(tmp_path, capsys):
    base = _base()
    # L = the whole pool: every draw labels the fold's 8 pool patients, and no others
    whole = labelled_draws(base, folds=5, pool=8, labeled=8, draws=2)
    for fold in range(5):
        pool = sorted({e["patient"] for e in fold_split(base, 5, fold, pool=8)["train"]})
        assert whole[fold, 0] == whole[fold, 1] == pool
    # L = 1: draws 0 .. 7 of a fold are its 8 pool patients, one each (the bundle's disjoint draws)
    single = labelled_draws(base, folds=5, pool=8, labeled=1, draws=8)
    for fold in range(5):
        drawn = [single[fold, d][0] for d in range(8)]
        assert sorted(drawn) == sorted({e["patient"] for e in fold_split(base, 5, fold, pool=8)["train"]})
    # the prostate gate's L = 1 runs (docs/results/gate-random_prostate): Case17 labels three of them
    split = tmp_path / "split.json"
    split.write_text(json.dumps(base))
    assert main(["draws", "--base-split", str(split), "--labeled", "8", "--draws", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("fold ") == 10 and "5 distinct labelled sets in 10 runs; drawn more than once:" in out
    prostate = json.loads((REPO / "docs/results/cpu-mini_prostate/split.json").read_text())
    drawn = labelled_draws(prostate, folds=5, pool=8, labeled=1, draws=2)
    assert [k for k, p in drawn.items() if p == ["Case17"]] == [(0, 1), (3, 0), (4, 1)]
