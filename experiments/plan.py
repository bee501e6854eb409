"""
The plan of an experiment, made in one pass from the experiment as asked for: every cell described once (bundle,
config, overrides, folder, the pre-training it loads) in execution order, ``plan.json``, the split files to write
first and the dry-run description. Before a run the folder is checked against it: a rerun with other settings under
the same name is refused, and so is a cell on disk that ran with other settings than the plan gives it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bundles import bundle_config, keys_read, stacked_config
from experiments.done import finetune_done, pretrain_done, trained
from experiments.experiment import (
    DATASETS,
    EXTERNAL_TEST,
    INPUT_GRID_SETS,
    INTERNAL_TEST,
    Experiment,
    FinetuneCell,
    PretrainCell,
    pretrain_name,
)
from experiments.presets import ALL_LABELLED, METHODS, UnsupportedMethod, preset_cuts
from experiments.settings import IGNORED_KEYS, PRETRAIN_SETTINGS_KEY, SETTINGS_KEY, recorded_changes
from experiments.status import read_status

__all__ = [
    "PLAN_FILE",
    "Plan",
    "check_cell_settings",
    "check_plan",
    "describe",
    "execution_order",
    "plan_cells",
    "plan_experiment",
    "read_plan",
    "whole_experiment",
]

logger = logging.getLogger("experiments")

#: the experiment's record in its folder (:py:attr:`Plan.record`).
PLAN_FILE = "plan.json"

Cell = PretrainCell | FinetuneCell


@dataclass(frozen=True)
class Plan:
    """
    What a run of an experiment runs and writes, each cell described once.

    Args:
        folder: the experiment's folder.
        cells: the cells of this run, in execution order (:py:func:`execution_order`).
        results_cells: every fine-tuning cell of the folder, also those of earlier runs' methods, L and draws
            (:py:func:`whole_experiment`): the cells of ``results.csv``.
        record: ``plan.json``: the experiment, the preset, its cuts, each method's label and each pre-training's
            bundle, config and overrides.
        header: the experiment in a few lines (the progress log's and the dry run's first lines).
        shared: the overrides every run of ``pretrain.json``, ``train.json`` and ``evaluate.json`` gets.
        splits: ``(bundle, config, overrides)`` whose ``split`` item writes each split file, the fine-tuning
            dataset's first.
    """

    folder: Path
    cells: list[Cell]
    results_cells: list[FinetuneCell]
    record: dict[str, Any]
    header: list[str]
    shared: dict[str, dict[str, Any]]
    splits: list[tuple[Path, str, dict[str, Any]]]


def plan_experiment(experiment: Experiment, check: bool = True) -> Plan:
    """
    The plan of ``experiment``.

    Args:
        experiment: the experiment.
        check: refuse a folder that ran other settings (its ``plan.json``: :py:func:`check_plan`; a cell on disk:
            :py:func:`check_cell_settings`), and describe every cell the folder holds in
            ``results_cells`` and ``record`` (:py:func:`whole_experiment`); False (a dry run): nothing is checked and
            both hold this run's cells only.

    Raises:
        ValueError: when ``check`` finds the folder's plan or cells run with other settings.
    """
    if check:
        check_plan(experiment)
    whole = whole_experiment(experiment) if check else experiment
    meta_labels, evaluate_keys = _bundle_reads(experiment)
    cuts, whole_cuts = preset_cuts(experiment.preset), preset_cuts(whole.preset)
    pretrain, finetune = _plan_cells(experiment, meta_labels, evaluate_keys)
    cells = execution_order(pretrain, finetune)
    if whole is not experiment:
        pretrain, finetune = _plan_cells(whole, meta_labels, evaluate_keys)
    plan = Plan(
        folder=experiment.folder,
        cells=cells,
        results_cells=finetune,
        record=_record(whole, pretrain, finetune, whole_cuts),
        header=_header(experiment, len(cells), cuts),
        shared=_shared_overrides(experiment),
        splits=[
            (_bundle(experiment, dataset), config, _run_overrides(experiment, dataset))
            for dataset, config in ((experiment.data, "train"), (experiment.source, "pretrain"))
        ],
    )
    if check:
        check_cell_settings(cells)
    return plan


def _bundle(experiment: Experiment, dataset: str) -> Path:
    return Path(experiment.bundle_dir) / DATASETS[dataset][0]


def _split_file(experiment: Experiment, dataset: str) -> Path:
    return experiment.folder / ("split.json" if dataset == experiment.data else f"split_{dataset}.json")


def _run_overrides(experiment: Experiment, dataset: str) -> dict[str, Any]:
    """Overrides shared by every bundle run on ``dataset``: folders, split file, device and ``preset.common``."""
    subdir = DATASETS[dataset][1]
    out: dict[str, Any] = {
        "bundle_root": str(_bundle(experiment, dataset)),
        "work_dir": str(experiment.folder),
        "split_file": str(_split_file(experiment, dataset)),
    }
    if subdir is not None:
        out["dataset_dir"] = str(Path(experiment.data_root) / subdir)
    if experiment.preset.device is not None:
        out["device"] = f"$torch.device({experiment.preset.device!r})"
    out.update(experiment.preset.common)
    return out


def _shared_overrides(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """The overrides every run of each config gets, before a method's and a cell's own."""
    data, source = _run_overrides(experiment, experiment.data), _run_overrides(experiment, experiment.source)
    return {
        "pretrain.json": {**source, **experiment.preset.pretrain},
        "train.json": {**data, **experiment.preset.finetune},
        "evaluate.json": data,
    }


def plan_cells(experiment: Experiment) -> tuple[list[PretrainCell], list[FinetuneCell]]:
    """
    The cells of an experiment: one pre-training per method that has one (shared by the methods fine-tuning its
    encoder), and one fine-tuning cell per (method, L, draw, seed); repeat r = draw * seeds_per_draw + k uses seed r.
    A fully supervised method has one cell per repeat at L = ``ALL_LABELLED`` (every training patient labelled).
    Draws and seeds are the same for every method, so the comparisons are paired. Methods that need a meta label
    the pre-training dataset lacks are left out with a warning (the paper's "/" cells).
    """
    return _plan_cells(experiment, *_bundle_reads(experiment))


def _bundle_reads(experiment: Experiment) -> tuple[list[str], set[str]]:
    """
    What the plan reads from the bundle configs: the pre-training dataset's meta labels, and the keys that the
    fine-tuning dataset's evaluation reads (``evaluate.json`` on top of ``train.json``: the evaluation builds the
    network and the preprocessing the training had: every training override among them, e.g. ``norm`` or
    ``fov_shape`` given with --finetune-set, goes to the evaluations as well; one only the training reads, e.g.
    ``lr``, does not).
    """
    source, data = _bundle(experiment, experiment.source), _bundle(experiment, experiment.data)
    return bundle_config(source, "pretrain")["meta_labels"], keys_read(stacked_config(data, "evaluate"))


def _plan_cells(
    experiment: Experiment, meta_labels: list[str], evaluate_keys: set[str]
) -> tuple[list[PretrainCell], list[FinetuneCell]]:
    """:py:func:`plan_cells` with what it reads from the bundle configs (:py:func:`_bundle_reads`)."""
    preset = experiment.preset
    source_bundle = _bundle(experiment, experiment.source)
    shared = _shared_overrides(experiment)
    pretrain: dict[tuple[str, int], PretrainCell] = {}
    methods = []
    for name in preset.methods:
        owner = METHODS[name].pretrain_method
        if owner is not None and (owner, preset.pretrain_seeds[0]) not in pretrain:
            if METHODS[owner].supervised_pretraining:
                cells = [_supervised_pretrain_cell(experiment, owner, seed) for seed in preset.pretrain_seeds]
            else:
                try:
                    method_overrides = METHODS[owner].pretrain_overrides(meta_labels)
                except UnsupportedMethod as error:
                    logger.warning("Leaving out %s: %s", name, error)
                    continue
                overrides = {**shared["pretrain.json"], **method_overrides}
                cells = [_seeded(PretrainCell(owner, source_bundle, overrides), seed) for seed in preset.pretrain_seeds]
            pretrain.update(((owner, cell.seed), cell) for cell in cells)
        methods.append(name)

    finetune_cells = []
    for name in methods:
        method = METHODS[name]
        owner = method.pretrain_method
        for num_labeled in (ALL_LABELLED,) if method.fully_supervised else preset.num_labeled:
            for pretrain_seed in preset.pretrain_seeds if owner else (None,):
                source = pretrain[(owner, pretrain_seed)] if owner else None
                for draw in range(preset.repeats):
                    for k in range(preset.seeds_per_draw):
                        cell = _finetune_cell(
                            experiment, name, num_labeled, draw, k, source, shared["train.json"], evaluate_keys
                        )
                        finetune_cells.append(cell)
    return list(pretrain.values()), finetune_cells


def _seeded(cell: PretrainCell, seed: int) -> PretrainCell:
    """``cell`` with pre-training seed ``seed`` (seed 0: the bundle's default seed and folder, unchanged overrides)."""
    if seed == 0:
        return dataclasses.replace(cell, seed=0)
    overrides = {**cell.overrides, "seed": seed, "method": pretrain_name(cell.method, seed)}
    return dataclasses.replace(cell, overrides=overrides, seed=seed)


def _finetune_cell(
    experiment: Experiment,
    name: str,
    num_labeled: int,
    draw: int,
    k: int,
    pretrain: PretrainCell | None,
    shared: Mapping[str, Any],
    evaluate_keys: set[str],
) -> FinetuneCell:
    """
    The fine-tuning of method ``name`` at ``num_labeled`` on labelled draw ``draw`` with the draw's ``k``-th seed,
    from ``pretrain``'s encoder (None: random initialisation), on top of the ``shared`` overrides of every
    ``train.json`` run; its evaluations get the training overrides that the evaluation reads (``evaluate_keys``).
    One seed per repeat: repeats differ even when the pool allows a single labelled subset. A pre-training seed
    s > 0 adds ``_p<s>`` to the folder.
    """
    preset, method = experiment.preset, METHODS[name]
    bundle = _bundle(experiment, experiment.data)
    seed = repeat = draw * preset.seeds_per_draw + k
    shown = "all" if num_labeled == ALL_LABELLED else num_labeled
    suffix = f"_p{pretrain.seed}" if pretrain is not None and pretrain.seed else ""
    folder = experiment.folder / "finetune" / f"{name}_L{shown}_d{draw}_s{seed}{suffix}"
    train = {
        **shared,
        **method.finetune_overrides(),
        "init": method.pretrain_method or "random",
        "num_labeled": num_labeled,
        "draw": draw,
        "seed": seed,
        "output_dir": str(folder),
        "ckpt_dir": str(folder / "models"),
    }
    if pretrain is not None:
        train["pretrained_path"] = str(pretrain.folder / "encoder.pt")
    evaluate = {
        **{key: v for key, v in train.items() if key in evaluate_keys},
        "ckpt_path": str(folder / "models" / "model.pt"),
        "eval_dir": str(folder / "eval"),
    }
    evals = {INTERNAL_TEST: evaluate}
    if experiment.test_root is not None:
        external = f"$gcl_monai.data.load_datalist({str(experiment.test_root)!r}, dataset=@dataset)"
        evals[EXTERNAL_TEST] = {**evaluate, "eval_dir": str(folder / "eval_external"), "test_data": external}
    if experiment.input_grid:
        for test_set, split in INPUT_GRID_SETS.items():
            evals[test_set] = {
                **evaluate,
                "dice_grid": "input",
                "test_split": split,
                "eval_dir": str(folder / test_set),
            }
    return FinetuneCell(
        method=name,
        num_labeled=num_labeled,
        draw=draw,
        seed=seed,
        repeat=repeat,
        bundle=bundle,
        train_overrides=train,
        eval_overrides=evals,
        pretrain=pretrain,
        dataset=experiment.data,
        pretrain_dataset=None if pretrain is None else experiment.source,
        preset=preset.name,
        pretrain_seed=None if pretrain is None else pretrain.seed,
    )


def _supervised_pretrain_cell(experiment: Experiment, name: str, seed: int = 0) -> PretrainCell:
    """
    A supervised pre-training: ``train.json`` of the pre-training dataset with every training patient labelled and
    the preset's fine-tuning settings (the fully supervised row's training, with the pre-training seed), from random
    weights.
    """
    folder = experiment.folder / "pretrain" / pretrain_name(name, seed)  # PretrainCell.folder
    overrides = {
        **_run_overrides(experiment, experiment.source),
        **experiment.preset.finetune,
        **METHODS["fully_supervised"].finetune_overrides(),
        "init": "random",
        "num_labeled": ALL_LABELLED,
        "draw": 0,
        "seed": seed,
        "output_dir": str(folder),
        "ckpt_dir": str(folder / "models"),
    }
    return PretrainCell(name, _bundle(experiment, experiment.source), overrides, config="train", seed=seed)


def execution_order(pretrain: list[PretrainCell], finetune: list[FinetuneCell]) -> list[PretrainCell | FinetuneCell]:
    """
    Paired groups first: the fine-tuning cells of one (L, draw, seed) for every method, group after group, each
    pre-training placed just before the first cell that needs it. A run stopped at any point then holds complete
    paired comparisons over its first draws, and random initialisation (first in the presets) times a
    fine-tuning cell before any pre-training runs.
    """
    groups: dict[tuple[int, int, int], list[FinetuneCell]] = {}
    for cell in finetune:
        groups.setdefault((cell.num_labeled, cell.draw, cell.seed), []).append(cell)
    order: list[PretrainCell | FinetuneCell] = []
    scheduled: set[int] = set()
    # the fully supervised cells (L = ALL_LABELLED) after every labelled draw
    for key in sorted(groups, key=lambda k: (k[0] == ALL_LABELLED, k)):
        for cell in groups[key]:
            if cell.pretrain is not None and id(cell.pretrain) not in scheduled:
                scheduled.add(id(cell.pretrain))
                order.append(cell.pretrain)
            order.append(cell)
    # a pre-training whose fine-tuning cells are all left out still runs (e.g. for t-SNE)
    order.extend(cell for cell in pretrain if id(cell) not in scheduled)
    return order


def _trained_settings(value: Any) -> Any:
    """A preset's value without the overrides that change no trained result (``settings.IGNORED_KEYS``)."""
    return {k: v for k, v in value.items() if k not in IGNORED_KEYS} if isinstance(value, dict) else value


def read_plan(folder: str | Path) -> dict[str, Any]:
    """
    The :py:data:`PLAN_FILE` of the experiment folder ``folder`` (:py:attr:`Plan.record`).

    Raises:
        FileNotFoundError: ``folder`` holds no ``plan.json`` (not an experiment folder).
    """
    path = Path(folder) / PLAN_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {PLAN_FILE}: it is not an experiment folder.")
    return json.loads(path.read_text())


def check_plan(experiment: Experiment) -> None:
    """Refuses to mix settings in one experiment folder (only methods, L, repeats and seeds may change, and the
    overrides of :py:data:`experiments.settings.IGNORED_KEYS`). An external test set may be added to a
    folder that has none: its cells keep their training and only gain that evaluation (patients never seen, after
    the run); another one than the folder's, or none where it has one, is refused."""
    path = experiment.folder / PLAN_FILE
    if not path.exists():
        return
    stored = json.loads(path.read_text())
    ours = json.loads(json.dumps(_experiment_record(experiment)))
    free = ("methods", "num_labeled", "repeats", "seeds_per_draw", "name")
    for key in ("data", "pretrain_data"):
        if stored.get(key) != ours[key]:
            raise ValueError(f"{path}: {key} was {stored.get(key)!r}, now {ours[key]!r}; use another --name.")
    if stored.get("test_root") not in (None, ours["test_root"]):
        raise ValueError(
            f"{path}: this folder evaluates on the external test set {stored['test_root']!r}, not "
            f"{ours['test_root']!r}: pass --test-root {stored['test_root']}, or use another --name."
        )
    for key, value in ours["preset"].items():
        if key not in free and _trained_settings(stored["preset"].get(key)) != _trained_settings(value):
            raise ValueError(
                f"{path}: preset {key} was {stored['preset'].get(key)!r}, now {value!r}; results of different settings "
                "must not be mixed: use another --name."
            )


def check_cell_settings(cells: Sequence[PretrainCell | FinetuneCell]) -> int:
    """
    Refuses to go on when a cell that a rerun would take as done (or resume) ran with other settings than the plan
    gives it today (:py:mod:`experiments.settings`): a pre-training with a status file, a fine-tuning that
    finished training (its own settings, and those of the pre-training whose encoder it loaded, when recorded).

    Raises:
        ValueError: naming every such cell, the keys that differ with both values, and what to do.

    Returns:
        the number of such cells that ran before settings were recorded (not checked; logged as a warning).
    """
    stale, unrecorded = [], 0
    for cell in cells:
        status = read_status(cell.folder)
        if isinstance(cell, FinetuneCell) and not trained(status):
            continue  # trained again by the run
        if not status:
            continue
        if SETTINGS_KEY not in status:
            unrecorded += 1
            continue
        whose = {SETTINGS_KEY: "", PRETRAIN_SETTINGS_KEY: "its pre-training's "}
        changes = [
            f"{whose[record]}{k} was {was!r}, now {now!r}"
            for record, items in recorded_changes(status, cell).items()
            for k, was, now in items
        ]
        if changes:
            stale.append(f"{cell.label} ({cell.folder}): {', '.join(changes)}")
    if stale:
        raise ValueError(
            "These cells ran with other settings than this plan gives them, and a rerun would take them as done: "
            + "; ".join(stale)
            + ". Delete their folders to run them again with today's settings, or use another --name."
        )
    if unrecorded:
        logger.warning("%d cells ran before their settings were recorded: taken as done without a check.", unrecorded)
    return unrecorded


def whole_experiment(experiment: Experiment) -> Experiment:
    """
    ``experiment`` with the methods, values of L, draws and seeds that its folder's ``plan.json`` already holds added
    to today's (methods in the table order of :py:data:`~experiments.presets.METHODS`): ``plan.json``,
    ``results.csv`` and ``table.md`` then describe every cell of the folder, not only the last run's part. Call
    :py:func:`check_plan` first (the other settings must be the same).
    """
    path = experiment.folder / PLAN_FILE
    if not path.exists():
        return experiment
    stored, preset = json.loads(path.read_text())["preset"], experiment.preset
    gone = [m for m in stored.get("methods", ()) if m not in METHODS]
    if gone:
        logger.warning("%s: methods %s are no longer defined; their cells are left out of the results.", path, gone)
    methods = {*preset.methods, *stored.get("methods", ())}
    whole = preset.replace(
        methods=tuple(m for m in METHODS if m in methods),
        num_labeled=tuple(sorted({*preset.num_labeled, *stored.get("num_labeled", ())})),
        repeats=max(preset.repeats, stored.get("repeats", 0)),
        seeds_per_draw=max(preset.seeds_per_draw, stored.get("seeds_per_draw", 0)),
    )
    return dataclasses.replace(experiment, preset=whole)


def _experiment_record(experiment: Experiment) -> dict[str, Any]:
    return {
        "name": experiment.name,
        "data": experiment.data,
        "pretrain_data": experiment.source,
        "data_root": str(experiment.data_root),
        "results_dir": str(experiment.results_dir),
        "bundle_dir": str(experiment.bundle_dir),
        "test_root": None if experiment.test_root is None else str(experiment.test_root),
        "input_grid": experiment.input_grid,
        "preset": dataclasses.asdict(experiment.preset),
    }


def _record(
    experiment: Experiment, pretrain: list[PretrainCell], finetune: list[FinetuneCell], cuts: list[str]
) -> dict[str, Any]:
    """``plan.json``: ``experiment`` (the whole folder's, :py:func:`whole_experiment`), its preset's ``cuts``, cells."""
    return {
        **_experiment_record(experiment),
        "cuts": cuts,
        "methods": list(dict.fromkeys(c.method for c in finetune)),
        "labels": {m: METHODS[m].label for m in experiment.preset.methods},
        "pretrain": {c.name: {"bundle": str(c.bundle), "config": c.config, "overrides": c.overrides} for c in pretrain},
    }


def _header(experiment: Experiment, num_cells: int, cuts: list[str]) -> list[str]:
    """The experiment in a few lines, with what its preset cuts relative to the paper (``cuts``)."""
    lines = [
        f"Experiment {experiment.name}: preset {experiment.preset.name}, fine-tune and test on {experiment.data}, "
        f"pre-train on {experiment.source}; {num_cells} cells in {experiment.folder}"
    ]
    lines.append("What this preset cuts relative to the paper:" if cuts else "The paper's protocol, nothing cut.")
    lines.extend(f"  - {c}" for c in cuts)
    return lines


def describe(plan: Plan) -> str:
    """
    The plan as text (the dry run): the header, the overrides shared by each config's runs, then every cell with
    its own overrides, ``[done]`` when a rerun would skip it.
    """
    shared = plan.shared
    lines = plan.header + [f"Overrides of every {config} run: {overrides}" for config, overrides in shared.items()]

    def own(overrides: Mapping[str, Any], config: str) -> dict[str, Any]:
        return {k: v for k, v in overrides.items() if k not in shared[config] or shared[config][k] != v}

    for i, cell in enumerate(plan.cells):
        if isinstance(cell, PretrainCell):
            done = " [done]" if pretrain_done(cell) else ""
            config = f"{cell.config}.json"
            overrides = own(cell.overrides, config)
            lines.append(f"{i + 1:4d}. {cell.label}{done}: {cell.bundle.name} {config} {overrides}")
        else:
            done = " [done]" if finetune_done(cell) else ""
            overrides = own(cell.train_overrides, "train.json")
            lines.append(f"{i + 1:4d}. {cell.label}{done}: {cell.bundle.name} train.json {overrides}")
            for test_set, overrides in cell.eval_overrides.items():
                lines.append(f"        then evaluate.json ({test_set}) {own(overrides, 'evaluate.json')}")
    return "\n".join(lines)
