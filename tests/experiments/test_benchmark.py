"""The benchmark harness: methods and presets as bundle overrides, the plan, paired statistics, the report,
collapse handling, and (slow) an end-to-end run on the synthetic phantom through bundles/gcl_demo."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigWorkflow

from experiments import cells, plan, results
from experiments.__main__ import main
from experiments.bundles import config_files, parse_bundle_item
from experiments.cells import tensorboard_collapse
from experiments.done import finetune_done, pretrain_done
from experiments.experiment import Experiment, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, encoder_hash
from experiments.gpu_session.elsewhere import MODEL_ELSEWHERE
from experiments.paper_results import paper_dice
from experiments.plan import plan_cells
from experiments.presets import (
    ALL_LABELLED,
    METHODS,
    PRESETS,
    PRETRAINING_METHODS,
    UnsupportedMethod,
    finetune_iteration_overrides,
    preset_cuts,
)
from experiments.report import (
    markdown_report,
    paired_difference,
    paired_values,
    pretraining_summary,
    read_encoder_ranks,
    read_pretrain_scalars,
    read_results,
    write_report,
)
from experiments.status import read_status, write_status
from gcl_monai.handlers import RepresentationCollapse

ACDC_META = ["patient_id", "slice_quantile", "organ_state"]


def _write_plan(experiment: Experiment) -> None:
    """The experiment's ``plan.json``, as a run writes it."""
    (experiment.folder / plan.PLAN_FILE).write_text(json.dumps(plan.plan_experiment(experiment).record))


# ------------------------------------------------------------------------------------------------ methods, presets


@pytest.mark.parametrize(
    "name, meta_labels, pixel, grad_filter, mitigate",
    [
        ("simclr", [None], False, False, False),
        ("meta_patient", ["patient_id"], False, False, False),
        ("meta_quantile", ["slice_quantile"], False, False, False),
        ("meta_state", ["organ_state"], False, False, False),
        ("multi_meta", ACDC_META, False, False, False),
        ("multi_meta_mitigator", ACDC_META, False, False, True),
        ("pixcl", [None], True, False, False),
        ("pixcl_gradfilter", [None], True, True, False),
        ("gcl", ACDC_META, True, True, True),
        ("gcl_paper", ACDC_META, True, True, True),
    ],
)
def test_method_pretrain_overrides(name, meta_labels, pixel, grad_filter, mitigate):
    assert METHODS[name].pretrain_overrides(ACDC_META) == {
        "method": name,
        "meta_labels": meta_labels,
        "pixel_branch": pixel,
        "grad_filter_enabled": grad_filter,
        "mitigate": mitigate,
        "recipe": "paper" if name == "gcl_paper" else "gcl",
    }
    assert METHODS[name].pretrain_method == name


def test_methods_without_own_pretraining():
    assert METHODS["random"].pretrain_method is None
    assert METHODS["gcl_frozen"].pretrain_method == "gcl" and METHODS["gcl_frozen"].freeze_encoder
    with pytest.raises(ValueError):
        METHODS["gcl_frozen"].pretrain_overrides(ACDC_META)
    # prostate has no organ state: the paper's "/" cell
    with pytest.raises(UnsupportedMethod):
        METHODS["meta_state"].pretrain_overrides(["patient_id", "slice_quantile"])
    assert METHODS["gcl"].pretrain_overrides(["patient_id", "slice_quantile"])["meta_labels"] == [
        "patient_id",
        "slice_quantile",
    ]


def test_preset_cuts_name_each_change_from_the_papers_protocol():
    paper, mini, ablation = PRESETS["paper"], PRESETS["cpu-mini"], PRESETS["cpu-ablation"]
    assert preset_cuts(paper) == []
    cut = paper.replace(methods=("random", "gcl"), repeats=2, pretrain={"epochs": 3, "warmup_epochs": 1})
    left_out = ", ".join(m for m in paper.methods if m not in ("random", "gcl"))
    assert preset_cuts(cut) == [
        f"methods: random, gcl (left out: {left_out})",
        f"repeats (labelled draws): 2 (paper: {paper.repeats})",
        f"pretrain epochs: 3 (paper: {paper.pretrain['epochs']})",
        "pretrain warmup_epochs: 1 (not stated in the paper)",
    ]
    # the ablation runs every pre-training method with the mini preset's recipe
    assert ablation.methods == PRETRAINING_METHODS and ablation.pretrain == mini.pretrain


def test_preset_replace_and_iterations():
    mini = PRESETS["cpu-mini"]
    changed = mini.replace(pretrain={"epochs": 2}, methods=("random",))
    assert changed.pretrain["epochs"] == 2 and changed.pretrain["batch_size"] == 16 and mini.pretrain["epochs"] == 20
    with pytest.raises(ValueError, match="unknown methods"):
        mini.replace(methods=("moco",))
    assert finetune_iteration_overrides(250, 50) == {"epochs": 5, "iterations_per_epoch": 50}
    assert finetune_iteration_overrides(4, 50) == {"epochs": 1, "iterations_per_epoch": 4}
    assert finetune_iteration_overrides(120, None) == {"epochs": 3, "iterations_per_epoch": 50}


# ------------------------------------------------------------------------------------------------ plan


def test_evaluation_builds_what_the_training_built(tmp_path):
    """A --finetune-set override that the evaluation (evaluate.json on top of train.json) reads too (network, field
    of view) reaches the evaluation; one only the training reads does not."""
    norm = ["instance", {"affine": True}]
    finetune = {**PRESETS["cpu-mini"].finetune, "norm": norm, "fov_shape": "square", "lr": 0.01}
    preset = PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=1, finetune=finetune)
    experiment = Experiment(
        "e", "acdc", preset, data_root=Path("data"), results_dir=tmp_path, test_root=tmp_path / "ext"
    )
    (cell,) = plan_cells(experiment)[1]
    for evaluate in cell.eval_overrides.values():
        assert evaluate["norm"] == norm and evaluate["fov_shape"] == "square"
        assert evaluate["features"] == [16, 32, 64, 128, 256, 16]
        assert "lr" not in evaluate and "epochs" not in evaluate  # training-only keys stay with the training
        assert evaluate["split_file"] == cell.train_overrides["split_file"]
    gridded = dataclasses.replace(experiment, input_grid=True)
    (cell_in_grid,) = plan_cells(gridded)[1]
    assert set(cell_in_grid.eval_overrides) == {"test", "external", "test_input", "val_input"}
    for test_set, split in (("test_input", "test"), ("val_input", "val")):
        evaluate = cell_in_grid.eval_overrides[test_set]
        assert evaluate["dice_grid"] == "input" and evaluate["test_split"] == split and evaluate["norm"] == norm
        assert cell_in_grid.dice_file(test_set) == cell.folder / test_set / "dice.json"
    workflow = ConfigWorkflow(
        config_file=config_files(cell.bundle, "evaluate"), workflow_type=None, **cell.eval_overrides["test"]
    )
    network = workflow.parser.get_parsed_content("network_def", instantiate=True)
    assert any(isinstance(m, torch.nn.InstanceNorm2d) for m in network.modules())
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in network.modules())


def test_plan_is_paired_and_shares_pretraining(tmp_path):
    preset = PRESETS["cpu-mini"].replace(methods=("random", "simclr", "gcl", "gcl_frozen"))
    experiment = Experiment("e", "acdc", preset, data_root=Path("data"), results_dir=tmp_path)
    pretrain, finetune = plan_cells(experiment)
    assert [c.method for c in pretrain] == ["simclr", "gcl"]
    assert len(finetune) == 4 * 2 * 4
    gcl = pretrain[1]
    assert gcl.overrides["meta_labels"] == ACDC_META and gcl.overrides["epochs"] == 20
    assert gcl.folder == tmp_path / "e" / "pretrain" / "gcl"
    assert gcl.overrides["split_file"] == str(tmp_path / "e" / "split.json")
    by_method = {}
    for cell in finetune:
        by_method.setdefault(cell.method, []).append((cell.num_labeled, cell.draw, cell.seed))
        assert cell.train_overrides["split_file"] == gcl.overrides["split_file"]
        assert cell.train_overrides["features"] == [16, 32, 64, 128, 256, 16]
        assert cell.eval_overrides["test"]["ckpt_path"] == str(Path(cell.train_overrides["ckpt_dir"]) / "model.pt")
    assert len({tuple(v) for v in by_method.values()}) == 1  # the same draws and seeds for every method
    frozen = [c for c in finetune if c.method == "gcl_frozen"][0]
    assert frozen.pretrain is gcl and frozen.train_overrides["freeze_encoder"] is True
    assert frozen.train_overrides["pretrained_path"] == str(gcl.folder / "encoder.pt")
    assert "pretrained_path" not in [c for c in finetune if c.method == "random"][0].train_overrides
    order = plan.execution_order(pretrain, finetune)
    assert len(order) == len(pretrain) + len(finetune)
    labels = [c.label for c in order]
    # L=1, draw 0 for every method, each pre-training just before its first use, then draw 1, ...
    assert [c.method for c in order[:6]] == ["random", "simclr", "simclr", "gcl", "gcl", "gcl_frozen"]
    assert [isinstance(c, PretrainCell) for c in order[:6]] == [False, True, False, True, False, False]
    groups = [(c.num_labeled, c.draw, c.seed) for c in order if not isinstance(c, PretrainCell)]
    assert groups == sorted(groups) and groups[:4] == [(1, 0, 0)] * 4 and groups[4] == (1, 1, 1)
    assert len(set(labels)) == len(labels)


def test_table3_plan_semi_supervised_and_fully_supervised_cells(tmp_path):
    preset = PRESETS["cpu-semi"].replace(repeats=2)
    semi_supervised_of = {  # Table 3's rows, in order, and the semi-supervised fine-tuning of each
        "random": None,
        "vat": "vat",
        "mean_teacher": "mean_teacher",
        "mixup": "mixup",
        "gcl": None,
        "gcl_mixup": "mixup",
        "gcl_mean_teacher": "mean_teacher",
        "fully_supervised": None,
    }
    assert preset.methods == tuple(semi_supervised_of)
    pretrain, finetune = plan_cells(Experiment("t3", "acdc", preset, data_root=Path("data"), results_dir=tmp_path))
    assert [c.method for c in pretrain] == ["gcl"]  # GCL + Mixup and GCL + M.T. fine-tune the GCL encoder
    by_method = {}
    for cell in finetune:
        by_method.setdefault(cell.method, []).append(cell)
    expected = {**{m: 2 * 2 for m in preset.methods[:-1]}, "fully_supervised": 2}
    assert {m: len(c) for m, c in by_method.items()} == expected
    semi = {m: by_method[m][0].train_overrides.get("semi_supervised") for m in preset.methods}
    assert semi == semi_supervised_of
    mixed = by_method["gcl_mixup"][0]
    assert mixed.pretrain is pretrain[0] and mixed.train_overrides["init"] == "gcl"
    full = by_method["fully_supervised"]
    assert [(c.num_labeled, c.draw, c.seed) for c in full] == [(ALL_LABELLED, 0, 0), (ALL_LABELLED, 1, 1)]
    assert full[0].folder.name == "fully_supervised_Lall_d0_s0"
    assert full[0].train_overrides["labeled"] == "$@split['pretrain'] + @split['train']"
    order = plan.execution_order(pretrain, finetune)
    assert [c.method for c in order[-2:]] == ["fully_supervised"] * 2  # after every labelled draw
    assert [m for m in PRESETS["paper"].methods if METHODS[m].semi_supervised or METHODS[m].fully_supervised] == []


def test_fully_supervised_cell_labels_every_training_patient(tmp_path):
    preset = PRESETS["cpu-semi"].replace(methods=("fully_supervised",), repeats=1)
    experiment = Experiment("fs", "demo", preset, results_dir=tmp_path)
    _, (cell,) = plan_cells(experiment)
    split = parse_bundle_item(cell.bundle, "train", "split", cell.train_overrides)
    labelled = {d["patient_id"] for d in cells.labelled_subset(cell)}
    assert labelled == {d["patient_id"] for d in split["pretrain"] + split["train"]} and len(labelled) > 2


def test_supervised_encoder_reference_is_a_train_json_pretraining(tmp_path):
    preset = PRESETS["cpu-mini"].replace(methods=("random", "supervised_encoder"), repeats=2)
    experiment = Experiment("ref", "demo", preset, results_dir=tmp_path)
    (pretrain,), finetune = plan_cells(experiment)
    assert pretrain.config == "train" and pretrain.method == "supervised_encoder"
    assert pretrain.folder == tmp_path / "ref" / "pretrain" / "supervised_encoder"
    assert pretrain.overrides["output_dir"] == str(pretrain.folder)
    assert pretrain.overrides["ckpt_dir"] == str(pretrain.folder / "models")
    assert pretrain.overrides["init"] == "random" and pretrain.overrides["num_labeled"] == ALL_LABELLED
    assert pretrain.overrides["labeled"] == "$@split['pretrain'] + @split['train']"
    for key, value in preset.finetune.items():  # the fully supervised row's training
        assert pretrain.overrides[key] == value
    assert pretrain.config_value("epochs") == preset.finetune["epochs"]
    reference = [c for c in finetune if c.method == "supervised_encoder"]
    assert [(c.num_labeled, c.draw) for c in reference] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert all(c.pretrain is pretrain and c.train_overrides["init"] == "supervised_encoder" for c in reference)
    assert reference[0].train_overrides["pretrained_path"] == str(pretrain.folder / "encoder.pt")
    assert "supervised_encoder" not in PRETRAINING_METHODS  # a reference, not a row of the paper
    assert "shrink_perturb" not in reference[0].train_overrides  # the bundle's default fine-tuning
    stored = plan.plan_experiment(experiment).record["pretrain"]["supervised_encoder"]
    assert stored["config"] == "train"


def test_shrink_perturb_methods_share_the_pretraining_and_switch_it_on(tmp_path):
    preset = PRESETS["cpu-mini"].replace(
        methods=("random", "gcl", "gcl_sp", "supervised_encoder", "supervised_encoder_sp"), repeats=1
    )
    pretrain, finetune = plan_cells(Experiment("p", "demo", preset, results_dir=tmp_path))
    assert [c.method for c in pretrain] == ["gcl", "supervised_encoder"]
    by_method = {c.method: c for c in finetune if c.num_labeled == 1}
    for sp, owner in (("gcl_sp", "gcl"), ("supervised_encoder_sp", "supervised_encoder")):
        assert by_method[sp].train_overrides["shrink_perturb"] == [0.5, 1.0]
        assert "shrink_perturb" not in by_method[owner].train_overrides  # the bundles' plain fine-tuning
        assert by_method[sp].pretrain is by_method[owner].pretrain
        assert by_method[sp].train_overrides["init"] == owner
    assert "shrink_perturb" not in by_method["random"].train_overrides
    assert not {"gcl_sp", "simclr_sp", "supervised_encoder_sp"} & set(PRETRAINING_METHODS)


def test_report_shows_the_fully_supervised_column_and_the_paper_numbers(tmp_path):
    rows = [_row("random", 1, d, 0.4 + d / 10) for d in range(3)] + [_row("random", 2, d, 0.6) for d in range(3)]
    rows += [_row("mean_teacher", 1, d, 0.6) for d in range(3)]
    rows += [_row("fully_supervised", ALL_LABELLED, d, 0.9) for d in range(3)]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "plan.json").write_text(json.dumps(_plan(("random", "mean_teacher", "fully_supervised"))))
    lines = write_report(tmp_path).read_text().splitlines()
    assert "| Method | L=1 | L=2 | L=all |" in lines
    assert "| Fully Superv. | – | – | 0.900 ± 0.000 |" in lines
    assert "| Mean Teacher | +0.100 [-0.148, +0.348] (n=3, 2 higher) | – | – |" in lines  # paired with random at L=1
    header = "| Method | L=1 here | L=1 paper | L=2 here | L=2 paper | L=all here | L=all paper |"
    assert header in lines
    assert "| Random Init. | 0.500 ± 0.100 | 0.598 ± 0.023 | 0.600 ± 0.000 | 0.682 ± 0.012 | – | – |" in lines
    assert "| Fully Superv. | – | – | – | – | 0.900 ± 0.000 | 0.914 ± 0.003 (L=50) |" in lines
    assert paper_dice("prostate", "meta_state", 1) is None and paper_dice("acdc", "gcl", 8) == (0.905, 0.007)


def test_plan_out_of_distribution_and_external_test(tmp_path):
    preset = PRESETS["cpu-mini"].replace(methods=("random", "meta_state", "gcl"))
    experiment = Experiment(
        "ood", "prostate", preset, results_dir=tmp_path, pretrain_data="acdc", test_root=tmp_path / "ext"
    )
    pretrain, finetune = plan_cells(experiment)
    assert [c.method for c in pretrain] == ["meta_state", "gcl"]  # ACDC has the organ state
    assert pretrain[0].bundle.name == "gcl_acdc"
    assert pretrain[0].overrides["split_file"] == str(tmp_path / "ood" / "split_acdc.json")
    cell = finetune[-1]
    assert cell.bundle.name == "gcl_prostate"
    assert cell.train_overrides["split_file"] == str(tmp_path / "ood" / "split.json")
    assert set(cell.eval_overrides) == {"test", "external"}
    assert str(tmp_path / "ext") in cell.eval_overrides["external"]["test_data"]
    # in distribution on prostate, the organ state does not exist: the method is left out
    pretrain, finetune = plan_cells(Experiment("p", "prostate", preset, results_dir=tmp_path))
    assert [c.method for c in pretrain] == ["gcl"] and {c.method for c in finetune} == {"random", "gcl"}


def test_cli_dry_run(capsys, tmp_path):
    assert (
        main(
            [
                "--data",
                "acdc",
                "--dry-run",
                "--results-dir",
                str(tmp_path),
                "--pretrain-epochs",
                "3",
                "--methods",
                "random",
                "simclr",
                "--finetune-set",
                "lr=0.0005",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "preset cpu-mini+custom" in out and "pretrain epochs: 3 (paper: 300)" in out
    assert "finetune simclr_L2_d3_s3" in out and "'lr': 0.0005" in out
    assert not (tmp_path / "cpu-mini_acdc").exists()


# ------------------------------------------------------------------------------------------------ statistics, report


def test_paired_difference_by_hand():
    diff = paired_difference([0.6, 0.7, 0.5, 0.65], [0.5, 0.5, 0.5, 0.55])
    # d = (0.1, 0.2, 0.0, 0.1): mean 0.1, s = sqrt(0.02 / 3), half width t_{0.975,3} s / 2
    half = 3.1824 * math.sqrt(0.02 / 3) / 2
    assert diff.n == 4 and diff.mean == pytest.approx(0.1)
    assert diff.low == pytest.approx(0.1 - half, abs=1e-5) and diff.high == pytest.approx(0.1 + half, abs=1e-5)
    assert str(diff) == "+0.100 [-0.030, +0.230] (n=4, 3 higher)" and diff.higher == 3
    single = paired_difference([0.7], [0.6])
    assert single.n == 1 and math.isnan(single.low) and str(single) == "+0.100 (n=1, 1 higher)"
    # two pairs d = (0.2, 0.0): half width t_{0.975,1} = 12.7062 (printed tables) times s / sqrt(2) = 0.1
    two = paired_difference([0.7, 0.5], [0.5, 0.5])
    assert (two.low, two.high) == (pytest.approx(0.1 - 1.27062, abs=1e-5), pytest.approx(0.1 + 1.27062, abs=1e-5))
    with pytest.raises(ValueError):
        paired_difference([0.1], [0.1, 0.2])


def _row(method, num_labeled, draw, dice, status="ok", test_set="test"):
    return {
        "dataset": "acdc",
        "pretrain_dataset": "acdc",
        "method": method,
        "num_labeled": num_labeled,
        "repeat": draw,
        "draw": draw,
        "seed": 0,
        "test_set": test_set,
        "dice": dice,
        "dice_rv": dice,
        "status": status,
        "num_test_volumes": 40,
    }


def _plan(methods=("random", "simclr", "gcl")):
    return {
        "name": "hand",
        "data": "acdc",
        "pretrain_data": "acdc",
        "methods": list(methods),
        "labels": {m: METHODS[m].label for m in methods},
        "preset": {"name": "cpu-mini", "num_labeled": [1, 2], "repeats": 3, "seeds_per_draw": 1},
        "cuts": ["pretrain epochs: 20 (paper: 300)"],
        "pretrain": {},
    }


def test_report_from_hand_written_csv(tmp_path):
    rows = [
        _row("random", 1, 0, 0.4),
        _row("random", 1, 1, 0.5),
        _row("random", 1, 2, 0.6),
        _row("simclr", 1, 0, 0.5),
        _row("simclr", 1, 1, 0.5),
        _row("simclr", 1, 2, 0.8),
        _row("random", 2, 0, 0.7),
        _row("random", 2, 1, 0.6),
        _row("simclr", 2, 0, 0.9),
        _row("simclr", 2, 1, math.nan, status="failed"),
    ]
    rows += [_row("gcl", n, d, math.nan, status="collapsed") for n in (1, 2) for d in range(3)]
    with (tmp_path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "plan.json").write_text(json.dumps(_plan()))
    table = write_report(tmp_path).read_text()
    assert (tmp_path / "dice_vs_L.png").stat().st_size > 0
    parsed = read_results(tmp_path / "results.csv")
    assert paired_values(parsed, "simclr", "random", 1, "test") == ([0.5, 0.5, 0.8], [0.4, 0.5, 0.6])
    lines = table.splitlines()
    assert "| Method | L=1 | L=2 |" in lines
    assert "| Random Init. | 0.500 ± 0.100 | 0.650 ± 0.071 (n=2 of 3) |" in lines
    assert "| SimCLR (Base) | 0.600 ± 0.173 | 0.900 (n=1 of 3, 1 failed or collapsed) |" in lines
    assert "| GCL (full model) | collapsed | collapsed |" in lines
    # differences (0.1, 0.0, 0.2): mean 0.1, s = 0.1, half width 4.303 * 0.1 / sqrt(3) = 0.248
    assert "| SimCLR (Base) | +0.100 [-0.148, +0.348] (n=3, 2 higher) | +0.200 (n=1, 1 higher) |" in lines
    assert "| GCL (full model) | – | – |" in lines
    assert "- pretrain epochs: 20 (paper: 300)" in lines
    assert "| Random Init. | 0.500 | 0.650 |" in lines  # per-class Dice (rv)
    assert markdown_report(parsed, _plan()) == table


def test_validation_rows_hold_the_last_validation_dice(tmp_path, monkeypatch):
    """Each trained cell gets a ``val`` row: the trainer's last ``val_mean_dice`` (not its best), no class columns."""
    from torch.utils.tensorboard import SummaryWriter

    experiment = Experiment(
        "v", "demo", PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=2), results_dir=tmp_path
    )
    logged, silent = plan_cells(experiment)[1]
    experiment.folder.mkdir(parents=True)
    (experiment.folder / "split.json").write_text(json.dumps({"val": [{"image": "a"}, {"image": "b"}, {"image": "c"}]}))
    for cell, dice in ((logged, 0.61), (silent, 0.52)):
        cell.dice_file("test").parent.mkdir(parents=True)
        variants = {"dice_ed": dice + 0.04, "dice_pooled_2d": dice + 0.02 if dice > 0.6 else None}
        cell.dice_file("test").write_text(
            json.dumps({"dice": dice, "dice_per_class": {"rv": dice}, "num_volumes": 4, **variants})
        )
        write_status(cell.folder, {"status": "finished", "trained": True})
    with SummaryWriter(str(logged.folder / "tensorboard")) as writer:
        for epoch, value in ((1, 0.2), (2, 0.5), (3, 0.4)):
            writer.add_scalar("val_mean_dice", value, epoch)
    monkeypatch.setattr(results, "labelled_patients", lambda cell: "p")
    rows = results.collect_rows([logged, silent])
    assert [(r["draw"], r["test_set"]) for r in rows] == [(0, "test"), (0, "val"), (1, "test")]
    val = rows[1]
    assert val["dice"] == pytest.approx(0.4) and val["num_test_volumes"] == 3 and val["status"] == "ok"
    assert not [k for k in val if k.startswith("dice_")] and rows[0]["dice_rv"] == 0.61
    # the evaluation variants are the test set's: in its rows (NaN where dice.json has none), not in the val row
    assert rows[0]["ed_dice"] == pytest.approx(0.65) and rows[0]["pooled_2d_dice"] == pytest.approx(0.63)
    assert rows[2]["ed_dice"] == pytest.approx(0.56) and math.isnan(rows[2]["pooled_2d_dice"])
    assert "ed_dice" not in val and "pooled_2d_dice" not in val
    results.write_csv(rows, tmp_path / "results.csv")
    plan = {**_plan(("random",)), "data": "demo", "pretrain_data": "demo"}
    table = markdown_report(read_results(tmp_path / "results.csv"), plan)
    assert "## Dice on the `val` set (3 volumes)" in table and "### Dice per class (`test`)" in table
    assert "### Dice per class (`val`)" not in table and "Next to the paper (`val`)" not in table
    assert "| Random Init. | 0.400 (n=1 of 3) | – |" in table.splitlines()
    assert "### Evaluation variants (`test`)" in table and "### Evaluation variants (`val`)" not in table
    assert "| Method | L=1 primary | L=1 end-diastole only | L=1 pooled 2D |" in table
    # primary (0.61, 0.52), end-diastole (0.65, 0.56), pooled 2D (0.63 and one missing)
    assert "| Random Init. | 0.565 ± 0.064 (n=2 of 3) | 0.605 ± 0.064 (n=2 of 3) | 0.630 (n=1 of 3) |" in table


def test_tensorboard_collapse(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    chance = math.log(2 * 16 - 1)
    for name, loss, std in (("collapsed", chance, 1e-5), ("healthy", 2.5, 0.05)):
        with SummaryWriter(str(tmp_path / name)) as writer:
            for step in range(1, 31):
                writer.add_scalar("img/simclr", loss, step)
                writer.add_scalar("loss", loss, step)
                writer.add_scalar("std/img", std, step)
    collapsed, loss, std = tensorboard_collapse(tmp_path / "collapsed", batch_size=16)
    assert collapsed and loss == pytest.approx(chance) and std == pytest.approx(1e-5)
    assert tensorboard_collapse(tmp_path / "healthy", batch_size=16)[0] is False
    assert tensorboard_collapse(tmp_path / "missing", batch_size=16) == (False, None, None)
    # a loss that fluctuates around ln(2B - 1) (window mean at chance) is not stuck there; one that stays is
    for name, wiggle in (("noisy", 0.1), ("stuck", 1e-4)):
        with SummaryWriter(str(tmp_path / name)) as writer:
            for step in range(1, 31):
                writer.add_scalar("img/simclr", chance + wiggle * (-1) ** step, step)
                writer.add_scalar("std/img", 0.05, step)
    assert tensorboard_collapse(tmp_path / "noisy", batch_size=16)[0] is False
    assert tensorboard_collapse(tmp_path / "stuck", batch_size=16)[0] is True


def test_pretraining_summary_marks_an_image_branch_at_chance(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    chance = math.log(2 * 16 - 1)
    runs = {  # (image-wise losses, pixel-wise loss) per iteration
        "simclr": lambda i: ({"simclr": chance - i / 100}, None),
        "gcl": lambda i: ({"patient_id": chance + 0.01 * (-1) ** i, "slice_quantile": chance - 0.005}, 0.5),
        "multi_meta": lambda i: ({"patient_id": chance - 0.1, "slice_quantile": chance - 0.005}, None),
    }
    for method, losses in runs.items():
        with SummaryWriter(str(tmp_path / "pretrain" / method / "tensorboard")) as writer:
            for i in range(100):
                img, pix = losses(i)
                for name, value in img.items():
                    writer.add_scalar(f"img/{name}", value, i + 1)
                    if pix is not None:
                        writer.add_scalar(f"pix/{name}", pix, i + 1)
                writer.add_scalar("loss", sum(img.values()), i + 1)
                writer.add_scalar("std/img", 0.05, i + 1)
    plan = {**_plan(), "pretrain": {m: {"overrides": {"batch_size": 16}} for m in runs}}
    curves = read_pretrain_scalars(tmp_path, {**plan, "pretrain": {**plan["pretrain"], "never_ran": {}}})
    assert sorted(curves) == sorted(runs)
    # an exported encoder whose deepest convolution has rank 1 (16 outputs, 8 x 3 x 3 inputs)
    collapsed = torch.outer(torch.ones(16), torch.arange(72.0)).reshape(16, 8, 3, 3)
    torch.save(
        {
            "down_1.conv.weight": torch.randn(16, 8, 3, 3),
            "down_4.conv.weight": collapsed,
            "down_4.conv.bias": torch.ones(16),
        },
        tmp_path / "pretrain" / "gcl" / "encoder.pt",
    )
    ranks = read_encoder_ranks(tmp_path, plan)
    assert list(ranks) == ["gcl"] and ranks["gcl"][0] == pytest.approx(1.0) and ranks["gcl"][1] == 16
    rows = {
        line.split("|")[1].strip(): line for line in pretraining_summary(curves, plan, ranks) if line.startswith("| ")
    }
    assert "| 1 of 16 |" in rows["gcl"] and "| – |" in rows["simclr"]
    # windows of 10 iterations: SimCLR's loss goes from chance - 0.045 to chance - 0.945
    assert f"simclr: {chance - 0.045:.3f} → {chance - 0.945:.3f}" in rows["simclr"]
    assert rows["simclr"].endswith("| training |")
    assert rows["gcl"].endswith("| **stalled at chance: patient_id, slice_quantile** |")
    assert rows["multi_meta"].endswith("| **stalled at chance: slice_quantile** |")
    assert "patient_id: 0.500 → 0.500" in rows["gcl"]
    assert pretraining_summary({}, plan) == []


def test_collapse_is_reported_and_never_fine_tuned(tmp_path, monkeypatch):
    experiment = Experiment(
        "c", "demo", PRESETS["cpu-mini"].replace(methods=("simclr",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    pretrain, finetune = plan_cells(experiment)

    def collapse(*args, **kwargs):
        try:
            raise RepresentationCollapse("std/img = 0")
        except RepresentationCollapse as error:
            raise RuntimeError("Failed to evaluate the run expression") from error

    monkeypatch.setattr(cells, "run_bundle", collapse)
    assert cells.run_pretrain(pretrain[0]) == "collapsed"
    assert pretrain_done(pretrain[0])  # a collapse is final: a rerun does not retry it
    monkeypatch.setattr(results, "labelled_patients", lambda cell: "")
    rows = results.collect_rows(finetune)
    assert [(r["method"], r["status"], math.isnan(r["dice"])) for r in rows] == [("simclr", "collapsed", True)]
    assert "std/img = 0" in rows[0]["message"]


def test_interrupted_finetuning_is_retrained_not_evaluated(tmp_path, monkeypatch):
    """A ``model.pt`` left by a killed fine-tuning is a partly trained model: the rerun trains again."""
    experiment = Experiment(
        "f", "demo", PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    (cell,) = plan_cells(experiment)[1]
    calls = []
    monkeypatch.setattr(cells, "run_bundle", lambda bundle, config, workflow, overrides: calls.append(config))
    monkeypatch.setattr(cells, "labelled_subset", lambda cell: [])
    models = Path(cell.train_overrides["ckpt_dir"])
    models.mkdir(parents=True)
    (models / "model.pt").write_bytes(b"written by a run that was killed")
    cells.run_finetune(cell)
    assert calls == ["train", "evaluate"]
    assert read_status(cell.folder)["trained"]
    assert math.isnan(read_status(cell.folder)["val_dice"])  # recorded once; this run logged no validation
    calls.clear()
    cells.run_finetune(cell)  # trained, but its dice.json was never written: evaluates only
    assert calls == ["evaluate"]


def test_interrupted_finetuning_resumes_only_with_its_own_settings(tmp_path, monkeypatch):
    """A cell whose training stopped continues from its checkpoint (``resume``) when its recorded settings are
    today's; with other settings, or none recorded, it starts afresh; a semi-supervised cell always does."""
    experiment = Experiment(
        "i", "demo", PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    (cell,) = plan_cells(experiment)[1]
    resumes = []

    def stopped(bundle, config, workflow, overrides):
        if config == "train":
            resumes.append(overrides["resume"])
            raise RuntimeError("killed")

    monkeypatch.setattr(cells, "run_bundle", stopped)
    monkeypatch.setattr(cells, "labelled_subset", lambda cell: [])
    assert cells.run_finetune(cell) == "failed"
    assert cells.run_finetune(cell) == "failed"
    assert resumes == [False, True]
    assert "resume" not in cell.train_overrides  # the cell's own overrides (its recorded settings) are untouched
    status = read_status(cell.folder)
    write_status(cell.folder, {**status, "settings": {**status["settings"], "lr": 1.0}})
    cells.run_finetune(cell)
    cell.train_overrides["semi_supervised"] = "mean_teacher"
    cells.run_finetune(cell)
    cells.run_finetune(cell)
    assert resumes == [False, True, False, False, False]
    assert read_status(cell.folder)["finetune_seconds"] >= 0


def test_rerun_with_other_settings_is_refused(tmp_path):
    experiment = Experiment("x", "demo", PRESETS["cpu-mini"], results_dir=tmp_path)
    (tmp_path / "x").mkdir()
    _write_plan(experiment)
    plan.check_plan(Experiment("x", "demo", PRESETS["cpu-ablation"], results_dir=tmp_path))  # more methods: fine
    with pytest.raises(ValueError, match="pretrain"):
        changed = PRESETS["cpu-mini"].replace(pretrain={"epochs": 3})
        plan.check_plan(Experiment("x", "demo", changed, results_dir=tmp_path))
    # an override that changes no trained result (settings.IGNORED_KEYS) may come later, as in a run's next GPU session
    mini = PRESETS["cpu-mini"]
    batched = mini.replace(finetune={**mini.finetune, "batched_augmentation": True})
    plan.check_plan(Experiment("x", "demo", batched, results_dir=tmp_path))
    with pytest.raises(ValueError, match="finetune"):
        plan.check_plan(
            Experiment("x", "demo", batched.replace(finetune={**batched.finetune, "lr": 1.0}), results_dir=tmp_path)
        )
    # an external test set may be added later (only evaluations run); once there, it is the folder's
    plan.check_plan(Experiment("x", "demo", mini, results_dir=tmp_path, test_root=tmp_path / "unseen"))
    _write_plan(Experiment("x", "demo", mini, results_dir=tmp_path, test_root=tmp_path / "unseen"))
    plan.check_plan(Experiment("x", "demo", mini, results_dir=tmp_path, test_root=tmp_path / "unseen"))
    for other in (tmp_path / "other", None):
        with pytest.raises(ValueError, match=f"external test set '{tmp_path / 'unseen'}', not"):
            plan.check_plan(Experiment("x", "demo", mini, results_dir=tmp_path, test_root=other))


# ------------------------------------------------------------------------------------------------ recorded settings


def test_run_settings_are_the_bundles_literals_under_the_overrides(tmp_path):
    from experiments.settings import run_settings

    bundle = Experiment("s", "demo", PRESETS["cpu-mini"], results_dir=tmp_path).bundle_dir / "gcl_demo"
    train = json.loads((bundle / "configs" / "train.json").read_text())
    settings = run_settings(
        bundle,
        "train",
        {
            "lr": 0.5,
            "features": (8, 8, 8, 8, 8, 8),
            "work_dir": "/x",
            "device": "$torch.device('cpu')",
            "output_dir": "/y",
        },
    )
    assert settings["shrink_perturb"] == train["shrink_perturb"] is False  # a default of the bundle, not overridden
    assert settings["lr"] == 0.5 and settings["features"] == [8] * 6  # the overrides win; tuples compare as lists
    assert "labeled" not in settings and "network" not in settings  # expressions and components are not settings
    assert not {"work_dir", "device", "output_dir", "bundle_root"} & set(settings)  # folders and the device


def _finished_cell(cell, dice, settings=None):
    """A fine-tuning cell on disk as run_finetune leaves it: dice.json and a status (with ``settings`` if given)."""
    cell.dice_file("test").parent.mkdir(parents=True, exist_ok=True)
    cell.dice_file("test").write_text(json.dumps({"dice": dice, "dice_per_class": {"a": dice}, "num_volumes": 2}))
    status = {"status": "finished", "trained": True, "val_dice": math.nan}
    write_status(cell.folder, status if settings is None else {**status, "settings": settings})


def test_cells_run_with_other_settings_are_refused_not_taken_as_done(tmp_path):
    from experiments.settings import cell_settings

    experiment = Experiment(
        "r",
        "demo",
        PRESETS["cpu-mini"].replace(methods=("random", "simclr"), num_labeled=(1,), repeats=3),
        results_dir=tmp_path,
    )
    (pretrain,), finetune = plan_cells(experiment)
    same, earlier_default, unrecorded, simclr_cells = finetune[0], finetune[1], finetune[2], finetune[3:]
    _finished_cell(same, 0.5, cell_settings(same))
    # trained while train.json's default was shrink and perturb: the overrides alone are the same as today's
    _finished_cell(earlier_default, 0.5, {**cell_settings(earlier_default), "shrink_perturb": [0.5, 1.0]})
    _finished_cell(unrecorded, 0.5)  # trained before settings were recorded
    with pytest.raises(ValueError, match=r"random_L1_d1_s1 .*shrink_perturb was \[0.5, 1.0\], now False"):
        plan.check_cell_settings([pretrain, *finetune])
    shutil.rmtree(earlier_default.folder)  # what the message asks for: the cell is then trained again
    assert plan.check_cell_settings([pretrain, *finetune]) == 1  # the unrecorded cell, logged and not checked

    # a fine-tuning that did not finish training is trained again whatever it recorded
    write_status(simclr_cells[0].folder, {"status": "failed", "settings": {"lr": 1.0}})
    assert plan.check_cell_settings(finetune) == 1
    # one that loaded an encoder pre-trained with other settings than today's pre-training is stale too
    _finished_cell(simclr_cells[1], 0.5, cell_settings(simclr_cells[1]))
    stale_encoder = {**cell_settings(pretrain), "temperature": 0.5}
    write_status(simclr_cells[1].folder, {**read_status(simclr_cells[1].folder), "pretrain_settings": stale_encoder})
    with pytest.raises(ValueError, match=r"simclr_L1_d1_s1 .*its pre-training's temperature was 0.5, now 0.1"):
        plan.check_cell_settings(finetune)
    shutil.rmtree(simclr_cells[1].folder)
    # a pre-training is resumed from its checkpoints: its record is checked as soon as it has a status
    write_status(pretrain.folder, {"status": "interrupted", "settings": {**cell_settings(pretrain), "lr": 1.0}})
    with pytest.raises(ValueError, match=r"pretrain simclr .*lr was 1.0, now 0.0001"):
        plan.check_cell_settings([pretrain])


def test_a_switch_added_later_reads_as_its_old_behaviour_in_older_records(tmp_path):
    """A cell recorded before ``labeled_pool`` existed drew from the fine-tuning pool: not stale at the default."""
    from experiments.settings import (
        ADDED_LATER,
        SETTINGS_KEY,
        cell_settings,
        changed_settings,
        recorded_changes,
    )

    experiment = Experiment(
        "a", "demo", PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=2), results_dir=tmp_path
    )
    older, other_pool = plan_cells(experiment)[1]
    ours = cell_settings(older)
    assert ours["labeled_pool"] == ADDED_LATER["labeled_pool"] == "train"
    before = {k: v for k, v in ours.items() if k != "labeled_pool"}
    assert changed_settings(before, ours) == []
    assert changed_settings(before, {**ours, "labeled_pool": "train+pretrain"}) == ["labeled_pool"]
    assert changed_settings({**before, "lr": 1.0}, ours) == ["lr"]  # any other missing or changed key still counts
    assert changed_settings({k: v for k, v in before.items() if k != "lr"}, ours) == ["lr"]
    # the field of view's shape came later still: a record without it cropped each axis ("scaled")
    assert ours["fov_shape"] == ADDED_LATER["fov_shape"] == "scaled"
    without_shape = {k: v for k, v in before.items() if k != "fov_shape"}
    assert changed_settings(without_shape, ours) == []
    assert changed_settings(without_shape, {**ours, "fov_shape": "square"}) == ["fov_shape"]
    # the fine-tuning's augmentation, Dice reduction and clean-up switches came after that: a record without them
    # ran their old behaviour (15, 0.1, 0.5, False, False), which differs from today's defaults
    later = ("rotate_degrees", "scale_range", "affine_prob", "dice_batch", "keep_largest_component")
    assert [ADDED_LATER[k] for k in later] == [15.0, 0.1, 0.5, False, False]
    assert [ours[k] for k in later] == [30.0, 0.2, 0.8, True, "class"]
    old_behaviour = {**ours, **{k: ADDED_LATER[k] for k in later}}
    assert changed_settings({k: v for k, v in before.items() if k not in later}, old_behaviour) == []
    assert sorted(changed_settings({k: v for k, v in before.items() if k not in later}, ours)) == sorted(later)
    assert changed_settings(before, {**ours, "keep_largest_component": False}) == ["keep_largest_component"]
    # pre-training's float32 matrix-product precision came later: a pre-training record without it ran torch's default
    gcl = Experiment(
        "g", "demo", PRESETS["cpu-mini"].replace(methods=("gcl",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    gcl_pretrain = cell_settings(plan_cells(gcl)[0][0])
    assert gcl_pretrain["float32_matmul_precision"] == ADDED_LATER["float32_matmul_precision"] == "highest"
    without_precision = {k: v for k, v in gcl_pretrain.items() if k != "float32_matmul_precision"}
    assert changed_settings(without_precision, gcl_pretrain) == []
    assert changed_settings(without_precision, {**gcl_pretrain, "float32_matmul_precision": "medium"}) == [
        "float32_matmul_precision"
    ]
    # the batched augmentation came later still, and is not a setting (the same distribution): a cell fine-tuned per
    # slice is not stale for a plan that augments the batch at once, and the other way round
    assert "batched_augmentation" not in ours
    batched = cell_settings(
        dataclasses.replace(older, train_overrides={**older.train_overrides, "batched_augmentation": True})
    )
    assert batched == ours and changed_settings(before, batched) == []
    _finished_cell(older, 0.5, before)
    _finished_cell(other_pool, 0.5, {**ours, "labeled_pool": "train+pretrain"})
    with pytest.raises(ValueError, match=r"random_L1_d1_s1 .*labeled_pool was 'train\+pretrain', now 'train'"):
        plan.check_cell_settings([older, other_pool])
    shutil.rmtree(other_pool.folder)
    assert plan.check_cell_settings([older, other_pool]) == 0
    # a record without the switch is reported at its old value, not as absent
    moved = dataclasses.replace(older, train_overrides={**older.train_overrides, "labeled_pool": "train+pretrain"})
    assert recorded_changes({SETTINGS_KEY: before}, moved) == {
        SETTINGS_KEY: [("labeled_pool", "train", "train+pretrain")]
    }


def test_runs_record_their_settings(tmp_path, monkeypatch):
    from experiments.settings import cell_settings

    experiment = Experiment(
        "w", "demo", PRESETS["cpu-mini"].replace(methods=("simclr",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    (pretrain,), (finetune,) = plan_cells(experiment)
    seen = {}

    def killed(bundle, config, workflow, overrides):
        seen["status"] = read_status(pretrain.folder)  # what a run killed outright leaves
        raise RuntimeError("killed")

    monkeypatch.setattr(cells, "run_bundle", killed)
    assert cells.run_pretrain(pretrain) == "failed"
    assert seen["status"]["settings"] == cell_settings(pretrain) == read_status(pretrain.folder)["settings"]
    monkeypatch.setattr(cells, "run_bundle", lambda *args: None)
    monkeypatch.setattr(cells, "labelled_subset", lambda cell: [])
    cells.run_finetune(finetune)
    assert read_status(finetune.folder)["settings"] == cell_settings(finetune)
    assert read_status(finetune.folder)["pretrain_settings"] == cell_settings(pretrain)
    assert read_status(finetune.folder)["settings"]["init"] == "simclr"


def test_results_and_table_hold_every_run_of_the_folder(tmp_path, monkeypatch):
    """A rerun with other methods or L adds to plan.json, results.csv and table.md; it drops nothing."""
    from experiments import runner
    from experiments.settings import cell_settings

    def fake_finetune(cell):
        _finished_cell(
            cell, 0.1 * (cell.draw + 1) + (0.3 if cell.method == "fully_supervised" else 0.0), cell_settings(cell)
        )
        return "finished"

    monkeypatch.setattr(cells, "run_finetune", fake_finetune)
    monkeypatch.setattr(runner, "parse_bundle_item", lambda *args: None)
    monkeypatch.setattr(results, "labelled_patients", lambda cell: "p")
    first = PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=2)
    runner.run_experiment(Experiment("u", "demo", first, results_dir=tmp_path))
    second = first.replace(methods=("fully_supervised",), num_labeled=(2,), repeats=1)
    csv_path = runner.run_experiment(Experiment("u", "demo", second, results_dir=tmp_path))
    stored = json.loads((tmp_path / "u" / "plan.json").read_text())
    assert stored["methods"] == ["random", "fully_supervised"] and stored["preset"]["num_labeled"] == [1, 2]
    assert stored["preset"]["repeats"] == 2
    tested = [
        (r["method"], r["num_labeled"], r["draw"], r["dice"]) for r in read_results(csv_path) if r["test_set"] == "test"
    ]
    assert tested == [
        ("random", 1, 0, pytest.approx(0.1)),
        ("random", 1, 1, pytest.approx(0.2)),
        ("fully_supervised", ALL_LABELLED, 0, pytest.approx(0.4)),
    ]
    table = (tmp_path / "u" / "table.md").read_text().splitlines()
    assert "| Random Init. | 0.150 ± 0.071 | – | – |" in table
    assert "| Fully Superv. | – | – | 0.400 (n=1 of 2) |" in table


def test_report_command_pairs_with_chosen_baselines(tmp_path, capsys):
    rows = [
        _row(m, 1, d, v)
        for m, values in (("random", (0.4, 0.5, 0.6)), ("simclr", (0.5, 0.5, 0.8)), ("gcl", (0.6, 0.6, 0.9)))
        for d, v in enumerate(values)
    ]
    folder = tmp_path / "hand"
    folder.mkdir()
    results.write_csv(rows, folder / "results.csv")
    (folder / "plan.json").write_text(json.dumps(_plan()))
    assert main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--baselines", "gcl"]) == 0
    table = (folder / "table.md").read_text()
    assert "### Paired difference to GCL (full model) (`test`)" in table
    assert "Paired difference to Random Init." not in table
    # gcl - simclr = (0.1, 0.1, 0.1): simclr - gcl is -0.100 with no spread
    assert "| SimCLR (Base) | -0.100 [-0.100, -0.100] (n=3, 0 higher) | – |" in table.splitlines()
    with pytest.raises(SystemExit):
        main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--baselines", "gcl_paper"])
    assert "gcl_paper: not among the methods" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ --pretrain-from


def _finished_pretraining(tmp_path, name, preset, split):
    """An experiment folder with plan.json, split.json and a finished simclr pre-training (written by hand)."""
    experiment = Experiment(
        name, "demo", preset.replace(methods=("simclr",), num_labeled=(1,), repeats=1), results_dir=tmp_path
    )
    experiment.folder.mkdir(parents=True)
    (pretrain,), _ = plan_cells(experiment)
    _write_plan(experiment)
    (experiment.folder / "split.json").write_text(json.dumps(split))
    pretrain.folder.mkdir(parents=True)
    (pretrain.folder / "encoder.pt").write_bytes(b"weights of " + name.encode())
    write_status(pretrain.folder, {"status": "finished", "epochs": pretrain.config_value("epochs"), "seconds": 12.5})
    return experiment, pretrain


def test_pretrain_from_takes_only_the_same_run(tmp_path):
    from experiments.reuse import find_reusable, import_pretraining, same_split

    split = {
        k: [{"image": f"/a/{k}{i}.h5#image", "patient": f"{k}{i}"} for i in range(2)]
        for k in ("pretrain", "train", "val", "test")
    }
    moved = {k: [{**e, "image": "../elsewhere/" + e["image"].split("/")[-1]} for e in v] for k, v in split.items()}
    source, _ = _finished_pretraining(tmp_path, "src", PRESETS["cpu-mini"], split)
    assert same_split(source.folder / "split.json", source.folder / "split.json")

    target, cell = _finished_pretraining(tmp_path, "dst", PRESETS["cpu-mini"], moved)  # same patients, other paths
    shutil.rmtree(cell.folder)
    assert import_pretraining(cell, [source.folder]) == source.folder / "pretrain" / "simclr"
    assert (cell.folder / "encoder.pt").read_bytes() == b"weights of src"
    status = read_status(cell.folder)
    assert status["reused_from"] == str(source.folder / "pretrain" / "simclr") and status["seconds"] == 12.5
    assert pretrain_done(cell) and "reused_from" not in read_status(source.folder / "pretrain" / "simclr")
    # a folder of this experiment's own is never replaced
    (cell.folder / "encoder.pt").write_bytes(b"own")
    assert import_pretraining(cell, [source.folder]) is None and (cell.folder / "encoder.pt").read_bytes() == b"own"

    # other settings, other patients, or an unfinished run: not taken, and the reason says why
    _, longer = _finished_pretraining(tmp_path, "longer", PRESETS["cpu-mini"].replace(pretrain={"epochs": 3}), split)
    assert find_reusable(longer, source.folder)[0] is None
    assert "epochs" in find_reusable(longer, source.folder)[1]
    other_split = {**split, "test": split["test"][:1]}
    _, reshuffled = _finished_pretraining(tmp_path, "reshuffled", PRESETS["cpu-mini"], other_split)
    assert find_reusable(reshuffled, source.folder) == (None, f"{source.folder} split the patients differently")
    on_device, _ = _finished_pretraining(tmp_path, "on_device", PRESETS["cpu-mini"].replace(device="cpu"), split)
    assert find_reusable(cell, on_device.folder)[0] is not None  # the device changes only the rounding
    (on_device.folder / "split.json").unlink()
    assert find_reusable(cell, on_device.folder) == (None, f"{on_device.folder} holds no split.json")
    write_status(source.folder / "pretrain" / "simclr", {"status": "interrupted", "epochs": 20})
    assert "not finished" in find_reusable(cell, source.folder)[1]


def test_pretrain_from_compares_the_recorded_settings(tmp_path):
    """A pre-training run while a bundle default was another value is not the same run, whatever its overrides."""
    from experiments.reuse import find_reusable
    from experiments.settings import cell_settings

    split = {k: [{"image": f"/a/{k}.h5#image", "patient": k}] for k in ("pretrain", "train", "val", "test")}
    source, stored = _finished_pretraining(tmp_path, "src", PRESETS["cpu-mini"], split)
    _, cell = _finished_pretraining(tmp_path, "dst", PRESETS["cpu-mini"], split)
    shutil.rmtree(cell.folder)
    status = read_status(stored.folder)
    write_status(stored.folder, {**status, "settings": cell_settings(cell)})
    assert find_reusable(cell, source.folder)[0] is not None
    write_status(stored.folder, {**status, "settings": {**cell_settings(cell), "temperature": 0.5}})
    assert find_reusable(cell, source.folder) == (
        None,
        f"{source.folder}'s pre-training of simclr ran with other bundle settings (temperature)",
    )


def test_pretrain_from_refuses_another_config(tmp_path):
    from experiments.reuse import find_reusable

    split = {k: [{"image": f"/a/{k}.h5#image", "patient": k}] for k in ("pretrain", "train", "val", "test")}
    source, stored = _finished_pretraining(tmp_path, "src", PRESETS["cpu-mini"], split)
    cell = PretrainCell("simclr", stored.bundle, dict(stored.overrides), config="train")
    assert find_reusable(cell, source.folder) == (
        None,
        f"{source.folder}'s pre-training of simclr ran pretrain.json, not train.json",
    )
    # a folder that is no experiment: not taken, and the reason names it
    assert find_reusable(cell, tmp_path) == (None, f"{tmp_path} holds no plan.json: it is not an experiment folder.")


# ------------------------------------------------------------------------------------------------ --finetune-from


def _experiment_with_cells(tmp_path, name, split, preset=None, encoder=b"weights"):
    """An experiment folder (random and simclr, L = 1, 2 draws) with a finished simclr pre-training, no cells yet."""
    preset = (preset or PRESETS["cpu-mini"]).replace(methods=("random", "simclr"), num_labeled=(1,), repeats=2)
    experiment = Experiment(name, "demo", preset, results_dir=tmp_path)
    experiment.folder.mkdir(parents=True)
    (pretrain,), finetune = plan_cells(experiment)
    _write_plan(experiment)
    (experiment.folder / "split.json").write_text(json.dumps(split))
    pretrain.folder.mkdir(parents=True)
    (pretrain.folder / "encoder.pt").write_bytes(encoder)
    write_status(pretrain.folder, {"status": "finished"})
    return experiment, {c.folder.name: c for c in finetune}


def test_finetune_from_takes_only_the_same_run(tmp_path):
    from experiments.reuse import find_reusable_finetuning, import_finetuning
    from experiments.settings import cell_settings

    split = {
        k: [{"image": f"/a/{k}{i}.h5#image", "patient": f"{k}{i}"} for i in range(2)]
        for k in ("pretrain", "train", "val", "test")
    }
    source, theirs = _experiment_with_cells(tmp_path, "src", split)
    for cell in theirs.values():
        _finished_cell(cell, 0.4, cell_settings(cell))
        write_status(
            cell.folder,
            {
                **read_status(cell.folder),
                "pretrain_settings": cell_settings(cell.pretrain) if cell.pretrain else None,
            },
        )
    (theirs["simclr_L1_d0_s0"].folder / "models").mkdir()
    (theirs["simclr_L1_d0_s0"].folder / "models" / "model.pt").write_bytes(b"fine-tuned")
    _, ours = _experiment_with_cells(tmp_path, "dst", split)

    cell = ours["simclr_L1_d0_s0"]
    assert import_finetuning(cell, [source.folder]) == theirs["simclr_L1_d0_s0"].folder
    assert finetune_done(cell) and (cell.folder / "models" / "model.pt").read_bytes() == b"fine-tuned"
    status = read_status(cell.folder)
    assert status["reused_from"] == str(theirs["simclr_L1_d0_s0"].folder) and status["settings"]["draw"] == 0
    assert "reused_from" not in read_status(theirs["simclr_L1_d0_s0"].folder)  # the source is unchanged
    (cell.folder / "models" / "model.pt").write_bytes(b"own")  # a folder of this experiment's own stays
    assert import_finetuning(cell, [source.folder]) is None
    assert (cell.folder / "models" / "model.pt").read_bytes() == b"own"

    # other recorded settings, another encoder, another split, an untrained cell: not taken, and why
    random_cell, other = ours["random_L1_d1_s1"], theirs["random_L1_d1_s1"]
    assert find_reusable_finetuning(random_cell, source.folder)[0] == other.folder
    write_status(other.folder, {**read_status(other.folder), "settings": {**cell_settings(other), "lr": 0.5}})
    assert find_reusable_finetuning(random_cell, source.folder) == (
        None,
        f"{source.folder}'s random_L1_d1_s1 ran with other settings (lr)",
    )
    _, elsewhere = _experiment_with_cells(tmp_path, "own_encoder", split, encoder=b"pre-trained here")
    assert find_reusable_finetuning(elsewhere["simclr_L1_d1_s1"], source.folder) == (
        None,
        f"{source.folder}'s simclr encoder is not the one this experiment loads",
    )
    _, reshuffled = _experiment_with_cells(tmp_path, "reshuffled", {**split, "test": split["test"][:1]})
    assert find_reusable_finetuning(reshuffled["random_L1_d0_s0"], source.folder) == (
        None,
        f"{source.folder} split the patients differently",
    )
    write_status(theirs["simclr_L1_d1_s1"].folder, {"status": "failed"})
    assert find_reusable_finetuning(ours["simclr_L1_d1_s1"], source.folder) == (
        None,
        f"{source.folder} has no trained simclr_L1_d1_s1",
    )
    # a cell whose pre-training was run again with other settings is not the same run either
    write_status(
        theirs["simclr_L1_d0_s0"].folder,
        {
            **read_status(theirs["simclr_L1_d0_s0"].folder),
            "pretrain_settings": {**cell_settings(cell.pretrain), "temperature": 9.0},
        },
    )
    shutil.rmtree(cell.folder)
    assert find_reusable_finetuning(cell, source.folder) == (
        None,
        f"{source.folder}'s simclr_L1_d0_s0 loaded a pre-training with other settings (temperature)",
    )


def test_finetune_from_compares_an_unrecorded_cell_on_the_source_plan(tmp_path, caplog):
    from experiments.reuse import find_reusable_finetuning

    split = {k: [{"image": f"/a/{k}.h5#image", "patient": k}] for k in ("pretrain", "train", "val", "test")}
    source, theirs = _experiment_with_cells(tmp_path, "src", split)
    _finished_cell(theirs["random_L1_d0_s0"], 0.4)  # from before settings were recorded
    _, ours = _experiment_with_cells(tmp_path, "dst", split)
    assert find_reusable_finetuning(ours["random_L1_d0_s0"], source.folder)[0] == theirs["random_L1_d0_s0"].folder
    assert "ran before settings were recorded" in caplog.text
    nine_epochs = PRESETS["cpu-mini"].replace(finetune={**PRESETS["cpu-mini"].finetune, "epochs": 9})
    longer, _ = _experiment_with_cells(tmp_path, "longer", split, preset=nine_epochs)
    shutil.copytree(theirs["random_L1_d0_s0"].folder, longer.folder / "finetune" / "random_L1_d0_s0")
    assert find_reusable_finetuning(ours["random_L1_d0_s0"], longer.folder) == (
        None,
        f"{longer.folder}'s random_L1_d0_s0 ran with other overrides (epochs)",
    )


def test_run_takes_finished_cells_and_only_evaluates_what_is_missing(tmp_path, monkeypatch):
    from experiments import runner
    from experiments.settings import cell_settings

    split = {k: [{"image": f"/a/{k}.h5#image", "patient": k}] for k in ("pretrain", "train", "val", "test")}
    source, theirs = _experiment_with_cells(tmp_path, "src", split)
    for draw, name in enumerate(("random_L1_d0_s0", "random_L1_d1_s1")):
        _finished_cell(theirs[name], 0.3 + 0.1 * draw, cell_settings(theirs[name]))
    write_status(
        theirs["random_L1_d0_s0"].folder,
        {
            **read_status(theirs["random_L1_d0_s0"].folder),
            "finetune_seconds": 55.0,
            "eval_seconds": {"test": 5.0},
        },
    )
    theirs["random_L1_d1_s1"].dice_file("test").unlink()  # trained, not evaluated yet
    models = Path(theirs["random_L1_d1_s1"].train_overrides["ckpt_dir"])
    models.mkdir(parents=True)
    (models / "model.pt").write_bytes(b"the trained model")
    ran = []

    def fake_finetune(cell):
        ran.append(cell.folder.name)
        _finished_cell(cell, 0.7, cell_settings(cell))
        return "finished"

    monkeypatch.setattr(cells, "run_finetune", fake_finetune)
    monkeypatch.setattr(runner, "parse_bundle_item", lambda *args: None)
    monkeypatch.setattr(results, "labelled_patients", lambda cell: "p")
    preset = PRESETS["cpu-mini"].replace(methods=("random",), num_labeled=(1,), repeats=2)
    target = Experiment("dst", "demo", preset, results_dir=tmp_path)
    target.folder.mkdir()
    (target.folder / "split.json").write_text(json.dumps(split))
    csv_path = runner.run_experiment(target, finetune_from=[source.folder])
    assert ran == ["random_L1_d1_s1"]  # the taken cell without a test Dice is evaluated (run), d0 is not run
    assert [r["dice"] for r in read_results(csv_path) if r["test_set"] == "test"] == [pytest.approx(0.3), 0.7]
    log = (target.folder / "progress.log").read_text()
    assert "random_L1_d0_s0: taken from" in log
    # the taken cell's recorded 60 s time the cell still to run: ETA 0:01:00, not "not yet timed"
    assert "random_L1_d1_s1: taken from" in log and "ETA 0:01:00)" in log


# ------------------------------------------------------------------------------------------------ end to end


def _phantom_argv(results_dir: Path, name: str, *args: str) -> list[str]:
    """The benchmark's command line of experiment ``name`` on the demo phantom, in ``results_dir``, with ``args``, at
    tiny sizes: 32 x 32 slices, a BasicUNet of features 4 4 8 8 16 4."""
    tiny = ["--image-size", "32", "--features", "4", "4", "8", "8", "16", "4"]
    return ["--data", "demo", "--results-dir", str(results_dir), "--name", name, *args, *tiny]


@pytest.mark.slow
def test_end_to_end_on_the_phantom(tmp_path):
    from gcl_monai.bundle import ensure_phantom

    external = ensure_phantom(tmp_path / "external", num_patients=4, seed=1, image_size=64)
    argv = _phantom_argv(
        tmp_path,
        "smoke",
        *("--test-root", external, "--methods", "random", "simclr", "--num-labeled", "1", "--repeats", "2"),
        *("--pretrain-epochs", "1", "--finetune-iterations", "10"),
    )
    assert main(argv) == 0
    folder = tmp_path / "smoke"
    rows = read_results(folder / "results.csv")
    assert len(rows) == 2 * 2 * 3  # methods x repeats x (test sets and the validation patients)
    assert {r["status"] for r in rows} == {"ok"} and all(0.0 <= r["dice"] <= 1.0 for r in rows)
    assert {r["test_set"] for r in rows} == {"test", "external", "val"}
    assert {"dice_rv", "dice_myocardium", "dice_lv", "labelled_patients", "pretrain_seconds"} <= set(rows[0])
    for draw in (0, 1):  # paired: the same labelled patients for every method
        assert len({r["labelled_patients"] for r in rows if r["draw"] == draw}) == 1
    assert rows[0]["labelled_patients"] != [r for r in rows if r["draw"] == 1][0]["labelled_patients"]
    table = (folder / "table.md").read_text()
    assert "| Random Init. |" in table and "### Paired difference to Random Init. (`test`)" in table
    assert "## Dice on the `external` set (8 volumes)" in table and "## Dice on the `val` set (" in table
    assert (folder / "pretrain_curves.png").exists() and (folder / "dice_vs_L.png").exists()
    assert (folder / "split.json").exists() and (folder / "pretrain" / "simclr" / "encoder.pt").exists()

    stamps = {p: p.stat().st_mtime_ns for p in folder.glob("**/*.pt")}
    assert main(argv) == 0  # resumable: nothing runs again
    assert {p: p.stat().st_mtime_ns for p in folder.glob("**/*.pt")} == stamps
    second_run = (folder / "progress.log").read_text().split("Experiment smoke:")[2]
    assert second_run.count("already finished, skipped") == 5 and "starting" not in second_run
    assert len(read_results(folder / "results.csv")) == len(rows)
    # the same cells in each volume's own grid: only the new evaluations run, nothing is trained again
    assert main(argv + ["--input-grid"]) == 0
    assert {p: p.stat().st_mtime_ns for p in folder.glob("**/*.pt")} == stamps
    gridded = read_results(folder / "results.csv")
    assert len(gridded) == len(rows) + 2 * 2 * 2
    assert {r["status"] for r in gridded} == {"ok"} and {"test_input", "val_input"} < {r["test_set"] for r in gridded}
    volumes = {r["test_set"]: r["num_test_volumes"] for r in gridded}
    assert volumes["test_input"] == volumes["test"] and volumes["val_input"] == volumes["val"]

    # another experiment with the same settings takes the finished pre-training and fine-tuning cell
    other = [a for a in argv if a not in ("--test-root", external)]
    other[other.index("smoke")] = "reuse"
    other[other.index("--repeats") + 1] = "1"
    assert main(other + ["--methods", "simclr", "--pretrain-from", "smoke", "--finetune-from", "smoke"]) == 0
    log = (tmp_path / "reuse" / "progress.log").read_text()
    assert f"pretrain simclr: taken from {folder / 'pretrain' / 'simclr'}" in log
    assert f"finetune simclr_L1_d0_s0: taken from {folder / 'finetune' / 'simclr_L1_d0_s0'}" in log
    assert "starting" not in log
    reused = tmp_path / "reuse" / "pretrain" / "simclr"
    assert (reused / "encoder.pt").read_bytes() == (folder / "pretrain" / "simclr" / "encoder.pt").read_bytes()
    taken = read_results(tmp_path / "reuse" / "results.csv")
    assert [r["status"] for r in taken] == ["ok", "ok"]
    ours = [r for r in rows if (r["method"], r["draw"], r["test_set"]) == ("simclr", 0, "test")]
    assert [r["dice"] for r in taken if r["test_set"] == "test"] == [ours[0]["dice"]]

    # patients never seen, after the run: an external test set added to the finished folder only evaluates; the
    # model taken from "smoke" scores there what it scored in "smoke"
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "reuse").glob("**/*.pt")}
    assert main(other + ["--methods", "simclr", "--test-root", str(external)]) == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "reuse").glob("**/*.pt")} == stamps
    unseen = {r["test_set"]: r["dice"] for r in read_results(tmp_path / "reuse" / "results.csv")}
    smoke = [r for r in rows if (r["method"], r["draw"], r["test_set"]) == ("simclr", 0, "external")]
    assert set(unseen) == {"test", "external", "val"} and unseen["external"] == smoke[0]["dice"]

    # two cells at a time, each in a worker process: every fine-tuning cell runs (after the pre-training it loads)
    other[other.index("reuse")] = "parallel"
    other[other.index("--repeats") + 1] = "2"
    assert main(other + ["--pretrain-from", "smoke", "--jobs", "2"]) == 0
    log = (tmp_path / "parallel" / "progress.log").read_text()
    assert log.count(": starting") == 4 and log.count(": finished in") == 4
    assert {r["status"] for r in read_results(tmp_path / "parallel" / "results.csv")} == {"ok"}


@pytest.mark.slow
def test_supervised_encoder_end_to_end_on_the_phantom(tmp_path):
    argv = _phantom_argv(
        tmp_path,
        "ref",
        *("--methods", "supervised_encoder", "--num-labeled", "1", "--repeats", "1", "--finetune-iterations", "6"),
    )
    assert main(argv) == 0
    folder = tmp_path / "ref" / "pretrain" / "supervised_encoder"
    model = torch.load(folder / "models" / "model.pt", weights_only=True)
    encoder = torch.load(folder / "encoder.pt", weights_only=True)
    assert set(encoder) == {k for k in model if k.startswith(("conv_0.", "down_1.", "down_2.", "down_3.", "down_4."))}
    assert any(k.startswith("upcat_") for k in model) and all(torch.equal(v, model[k]) for k, v in encoder.items())
    assert read_status(folder)["status"] == "finished"
    rows = read_results(tmp_path / "ref" / "results.csv")
    assert {r["status"] for r in rows} == {"ok"} and {r["method"] for r in rows} == {"supervised_encoder"}
    log = (tmp_path / "ref" / "progress.log").read_text()
    assert "pretrain supervised_encoder: finished in" in log


def test_override_values_read_as_the_bundle_command_line_reads_them():
    """``KEY=VALUE`` of --finetune-set / --pretrain-set: JSON or Python literals, else the string; ``False`` must not
    stay the string "False", which a bundle reads as true."""
    from experiments.__main__ import _key_values

    got = _key_values(["dice_batch=False", "a=false", "b=None", "c=0.5", "d=[1, 2]", "e=(1, 2)", "f=class", "g='x'"])
    assert got == {
        "dice_batch": False,
        "a": False,
        "b": None,
        "c": 0.5,
        "d": [1, 2],
        "e": (1, 2),
        "f": "class",
        "g": "x",
    }
    assert got["dice_batch"] is False


def test_a_new_bundle_setting_is_registered_so_that_recorded_cells_stay_valid():
    """Cells recorded before a switch existed (e.g. a GPU run's first GPU session) lack its key: without an entry in
    ``ADDED_LATER`` or ``IGNORED_KEYS`` every one of them would be refused as stale by the next run."""
    from experiments.settings import ADDED_LATER, IGNORED_KEYS, _literal

    known = json.loads((Path(__file__).parent / "recorded_settings.json").read_text())
    for config in ("pretrain", "train"):
        for path in sorted((Path(__file__).parents[2] / "bundles").glob(f"*/configs/{config}.json")):
            literals = {k for k, v in json.loads(path.read_text()).items() if _literal(v)}
            new = sorted(literals - set(known[config]) - set(ADDED_LATER) - set(IGNORED_KEYS))
            assert not new, f"{path}: {new} are new settings: register them in ADDED_LATER or IGNORED_KEYS."


def _machine_checkout(root: Path, monkeypatch) -> Path:
    """A machine's checkout at ``root``: the demo bundle, the working directory its root (as the runs are made)."""
    shutil.copytree(Path(__file__).parents[2] / "bundles" / "gcl_demo", root / "bundles" / "gcl_demo")
    monkeypatch.chdir(root)
    return root


def _simclr_run_argv(*extra: str) -> list[str]:
    """A SimCLR run on the phantom, as small as it goes (one pre-training epoch, 4 fine-tuning iterations, L = 1)."""
    options = ("--methods", "simclr", "--num-labeled", "1", "--pretrain-epochs", "1", "--finetune-iterations", "4")
    return [*_phantom_argv(Path("results"), "run", *options, *extra), "--bundle-dir", "bundles"]


@pytest.mark.slow
def test_a_run_goes_on_from_its_kept_records_on_a_new_machine(tmp_path, monkeypatch, capsys):
    """
    ``keep`` on machine A, ``restore`` on machine B (no weights travel; each machine its own checkout): the finished
    cells are not run again, a pre-training that no cell needs is not made again, ``--remake-encoders`` makes it
    again with the first encoder's bytes (one thread: the same floating-point order), an encoder made again with
    other bytes fails loudly, and ``--set-aside-stale-cells`` then takes it and runs the first encoder's cell again.
    """
    from experiments.gpu_session.records import record_files
    from gcl_monai.bundle import ensure_phantom

    def checkout(name: str) -> Path:
        return _machine_checkout(tmp_path / name, monkeypatch)

    argv = _simclr_run_argv

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        machine_a = checkout("a")
        assert main(argv("--repeats", "1")) == 0
        encoder = machine_a / "results" / "run" / "pretrain" / "simclr" / "encoder.pt"
        status = read_status(encoder.parent)
        assert status[ENCODER_HASH_KEY] == encoder_hash(encoder)
        # a pre-training finished before the fingerprint was recorded gets it at the next run
        write_status(encoder.parent, {k: v for k, v in status.items() if k != ENCODER_HASH_KEY})
        assert main(argv("--repeats", "1")) == 0
        assert read_status(encoder.parent) == status
        kept = tmp_path / "kept"
        assert main(["keep", "results/run", str(kept)]) == 0
        files = {p.relative_to(kept).as_posix() for p in record_files(kept)}
        assert {"plan.json", "split.json", "results.csv", "pretrain/simclr/benchmark.json"} <= files
        assert not list(kept.rglob("*.pt")) and not list(kept.rglob("events.out.tfevents.*"))
        assert all(str(tmp_path) not in p.read_text() for p in record_files(kept))  # relative to the checkout
        with pytest.raises(SystemExit):  # never over a run's folder
            main(["restore", str(kept), "results/run"])

        machine_b = checkout("b")
        assert main(["restore", str(kept), "results/run"]) == 0
        assert main(argv("--repeats", "1")) == 0  # nothing runs: the cell is done, and no cell needs the encoder
        log = (machine_b / "results" / "run" / "progress.log").read_text().split("Experiment run:")[-1]
        assert "no cell left to train loads it: not made again" in log and "already finished, skipped" in log
        assert "starting" not in log and not list((machine_b / "results" / "run" / "pretrain" / "simclr").glob("*.pt"))
        rows = [read_results(folder / "results.csv") for folder in (Path("results/run"), kept)]
        restored, first = ([{k: v for k, v in r.items() if k != "run_dir"} for r in table] for table in rows)
        assert json.dumps(restored) == json.dumps(first)  # as text: NaN per-class cells of the validation rows

        # a test set added here cannot be evaluated: the model stayed on machine A (said; nothing else changes)
        external = ensure_phantom(tmp_path / "external", num_patients=2, seed=1, image_size=32)
        capsys.readouterr()
        assert main(argv("--repeats", "1", "--test-root", str(external))) == 1
        errors = [line for line in capsys.readouterr().out.splitlines() if " - ERROR - " in line]
        assert len(errors) == 1 and "ERROR - 1 result rows failed" in errors[0] and MODEL_ELSEWHERE in errors[0]
        log = (machine_b / "results" / "run" / "progress.log").read_text().split("Experiment run:")[-1]
        assert f"external: {MODEL_ELSEWHERE}" in log and "starting" not in log
        (cell,) = (machine_b / "results" / "run" / "finetune").iterdir()
        assert read_status(cell)["status"] == "finished"
        rows = read_results(Path("results/run/results.csv"))
        assert [(r["status"], r["message"]) for r in rows if r["test_set"] == "external"] == [
            ("failed", MODEL_ELSEWHERE)
        ]
        others = [{k: v for k, v in r.items() if k != "run_dir"} for r in rows if r["test_set"] != "external"]
        assert json.dumps(others) == json.dumps(first)  # the rows of the test and validation sets as they were
        shutil.rmtree(machine_b / "results")
        assert main(["restore", str(kept), "results/run"]) == 0

        assert main(argv("--repeats", "1", "--remake-encoders")) == 0
        made = machine_b / "results" / "run" / "pretrain" / "simclr" / "encoder.pt"
        assert made.read_bytes() == encoder.read_bytes()
        assert read_status(made.parent)["status"] == "finished"

        # no cell trained with the first encoder: the one made again replaces its fingerprint
        shutil.rmtree(machine_b / "results")
        assert main(["restore", str(kept), "results/run"]) == 0
        shutil.rmtree(machine_b / "results" / "run" / "finetune")
        write_status(made.parent, {**read_status(made.parent), ENCODER_HASH_KEY: "0" * 64})
        assert main(argv("--repeats", "1")) == 0
        assert read_status(made.parent)[ENCODER_HASH_KEY] == encoder_hash(made)
        assert "no cell trained with it: new" in (machine_b / "results" / "run" / "progress.log").read_text()

        # a second draw needs the encoder: it is made again, and other bytes than the first's fail the pre-training
        shutil.rmtree(machine_b / "results")
        assert main(["restore", str(kept), "results/run"]) == 0
        write_status(made.parent, {**read_status(made.parent), ENCODER_HASH_KEY: "0" * 64})
        assert main(argv("--repeats", "2")) == 1
        failed = read_status(made.parent)
        assert failed["status"] == "failed" and "differs from the encoder this cell made before" in failed["message"]
        assert failed[ENCODER_HASH_KEY] == "0" * 64  # the first fingerprint stays the reference

        # --set-aside-stale-cells takes the encoder made again and runs the first encoder's cell again with it
        assert main(argv("--repeats", "2", "--set-aside-stale-cells")) == 0
        taken = read_status(made.parent)
        assert taken["status"] == "finished" and taken[ENCODER_HASH_KEY] == encoder_hash(made)
        run = machine_b / "results" / "run"
        first_cell = [p.name for p in (run / "finetune").iterdir() if (kept / "finetune" / p.name).exists()]
        assert [p.name for p in (run / "discarded").iterdir()] == [f"finetune_{name}" for name in first_cell]
        assert len(first_cell) == 1 and "the new encoder taken" in (run / "progress.log").read_text()
        rows = read_results(run / "results.csv")
        assert {r["status"] for r in rows} == {"ok"} and len({r["run_dir"] for r in rows}) == 2
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_run_on_a_new_machine_goes_on_from_its_kept_encoders(tmp_path, monkeypatch):
    """
    ``keep --encoders`` on machine A, ``restore --encoders`` on machine B: the finished pre-training's encoder.pt is
    put back from its bfloat16 card (float32, each weight rounded to bfloat16), its status and the progress log say
    so, and a second draw's cell fine-tunes from it without pre-training again; a card of another encoder than the
    one the status fingerprinted is refused, naming both.
    """
    from experiments.gpu_session.kept_encoders import RESTORED_KEY
    from experiments.study.restored import RestoredCells, restored_cells

    def checkout(name: str) -> Path:
        return _machine_checkout(tmp_path / name, monkeypatch)

    argv = _simclr_run_argv

    machine_a = checkout("a")
    assert main(argv("--repeats", "1")) == 0
    first = torch.load(machine_a / "results" / "run" / "pretrain" / "simclr" / "encoder.pt", weights_only=True)
    first_cells = sorted(p.name for p in (machine_a / "results" / "run" / "finetune").iterdir())
    assert "simclr_L1_d0_s0" in first_cells
    kept, cards = tmp_path / "kept.tar.xz", tmp_path / "encoders"
    assert main(["keep", "results/run", str(kept), "--encoders", str(cards)]) == 0

    machine_b = checkout("b")
    assert main(["restore", str(kept), "results/run", "--encoders", str(cards)]) == 0
    run = machine_b / "results" / "run"
    restored = torch.load(run / "pretrain" / "simclr" / "encoder.pt", weights_only=True)
    assert restored.keys() == first.keys()
    assert all(
        restored[k].dtype == v.dtype and torch.equal(restored[k], v.to(torch.bfloat16).to(v.dtype))
        for k, v in first.items()
    )
    status = read_status(run / "pretrain" / "simclr")
    assert status[RESTORED_KEY]["card"] == "simclr.json" and status[RESTORED_KEY]["stored_dtype"] == "bfloat16"
    assert status[RESTORED_KEY]["sha256"] == encoder_hash(run / "pretrain" / "simclr" / "encoder.pt")
    assert status[ENCODER_HASH_KEY] != status[RESTORED_KEY]["sha256"]  # the first encoder's fingerprint stays
    assert status[RESTORED_KEY]["cells_finished"] == first_cells

    assert main(argv("--repeats", "2")) == 0
    log = (run / "progress.log").read_text()
    assert "pretrain simclr: encoder.pt restored from the kept bfloat16 card simclr.json" in log
    after = log.split("Experiment run:")[-1]
    assert "pretrain simclr: already finished, skipped" in after
    assert sum("finetune" in line and ": starting" in line for line in after.splitlines()) == 1  # the second draw
    assert read_status(run / "pretrain" / "simclr") == status  # not pre-trained again
    # amendment 5 of docs/protocol_converged.md: the analysis names the second draw's cell, and simclr's are mixed
    restored = restored_cells({run: read_results(run / "results.csv")})
    assert restored == RestoredCells(cells={"simclr": ("simclr_L1_d1_s1",)}, mixed=("simclr",))

    # keeping machine B's records again leaves the card as it was: the restored file stands for the first encoder
    cards_before = {p.name: p.read_bytes() for p in cards.iterdir()}
    assert main(["keep", "results/run", str(kept), "--encoders", str(cards)]) == 0
    assert {p.name: p.read_bytes() for p in cards.iterdir()} == cards_before
    assert main(["keep", "results/run", str(tmp_path / "kept_b"), "--encoders", str(tmp_path / "cards_b")]) == 0
    card_b = json.loads((tmp_path / "cards_b" / "simclr.json").read_text())
    assert card_b["encoder_sha256"] == status[ENCODER_HASH_KEY]
    weights_a = torch.load(cards / "simclr.pt", weights_only=True)
    weights_b = torch.load(tmp_path / "cards_b" / "simclr.pt", weights_only=True)
    assert weights_b.keys() == weights_a.keys() and all(torch.equal(v, weights_a[k]) for k, v in weights_b.items())

    # a third machine restores machine B's records: the cells that loaded the first encoder are still machine A's
    machine_c = checkout("c")
    assert main(["restore", str(kept), "results/run", "--encoders", str(cards)]) == 0
    run_c = machine_c / "results" / "run"
    again = read_status(run_c / "pretrain" / "simclr")[RESTORED_KEY]
    assert again["cells_finished"] == first_cells and again["restored_before"] == [status[RESTORED_KEY]["at"]]
    assert restored_cells({run_c: read_results(run_c / "results.csv")}) == restored
    monkeypatch.chdir(machine_b)

    shutil.rmtree(machine_b / "results")
    card = json.loads((cards / "simclr.json").read_text())
    (cards / "simclr.json").write_text(json.dumps({**card, "encoder_sha256": "0" * 64}))
    with pytest.raises(SystemExit):
        main(["restore", str(kept), "results/run", "--encoders", str(cards)])
    assert not (machine_b / "results" / "run" / "pretrain" / "simclr" / "encoder.pt").exists()
