"""
Runs a benchmark experiment: the paper's protocol, cell by cell, through the bundles' own configs.

An experiment lives in ``<results_dir>/<name>/``:

- ``plan.json``: the experiment and preset (a rerun with other settings under the same name is refused);
- ``split.json`` (and ``split_<pretrain data>.json`` out of distribution): the patient-level split shared by
  every method;
- ``pretrain/<method>/``: the pre-training bundle's run folder (checkpoints, ``encoder.pt``, ``tensorboard/``) and
  ``benchmark.json`` (status, seconds, final loss);
- ``finetune/<method>_L<L>_d<draw>_s<seed>/``: the fine-tuning bundle's output folder, ``models/model.pt``, one
  ``eval*/dice.json`` per test set and ``benchmark.json``;
- ``results.csv``, ``table.md``, ``dice_vs_L.png``, ``pretrain_curves.png`` and ``progress.log``.

Every cell is a ``monai.bundle.run`` of ``pretrain.json``, ``train.json`` or ``evaluate.json`` with overrides; a
finished cell is skipped by a rerun and an interrupted pre-training resumes from its last checkpoint.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import monai.bundle
from monai.bundle import ConfigParser

from gcl_monai.benchmark.presets import METHODS, Preset, UnsupportedMethod, preset_cuts
from gcl_monai.benchmark.report import read_scalars, write_report
from gcl_monai.data import num_slices
from gcl_monai.handlers import RepresentationCollapse

__all__ = [
    "DATASETS",
    "Experiment",
    "FinetuneCell",
    "PretrainCell",
    "collect_rows",
    "plan_cells",
    "run_experiment",
    "tensorboard_collapse",
]

logger = logging.getLogger("gcl_monai.benchmark")

#: dataset id -> (bundle folder, dataset sub-folder of the data root; None: the bundle generates its data).
DATASETS: dict[str, tuple[str, str | None]] = {
    "acdc": ("gcl_acdc", "acdc"),
    "prostate": ("gcl_prostate", "prostate"),
    "mmwhs": ("gcl_mmwhs", "mmwhs"),
    "demo": ("gcl_demo", None),
}
INTERNAL_TEST = "test"
EXTERNAL_TEST = "external"
STATUS_FILE = "benchmark.json"


def default_bundle_dir() -> Path:
    """The ``bundles/`` folder of the repository this package is installed from."""
    return Path(__file__).resolve().parents[2] / "bundles"


@dataclass
class Experiment:
    """
    One benchmark experiment.

    Args:
        name: experiment name (its folder under ``results_dir``).
        data: dataset of fine-tuning and test (a key of :py:data:`DATASETS`).
        preset: the protocol (methods, L, repeats, overrides).
        data_root: folder holding the datasets' folders.
        results_dir: parent folder of the experiments.
        bundle_dir: folder of the ``gcl_<data>`` bundles.
        pretrain_data: dataset of pre-training (None: ``data``); another dataset is the out-of-distribution setting.
        test_root: folder of an external test set in the layout of ``data`` (evaluated on all its patients).
    """

    name: str
    data: str
    preset: Preset
    data_root: Path = Path("data")
    results_dir: Path = Path("results")
    bundle_dir: Path = field(default_factory=default_bundle_dir)
    pretrain_data: str | None = None
    test_root: Path | None = None

    def __post_init__(self) -> None:
        for dataset in (self.data, self.source):
            if dataset not in DATASETS:
                raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS)}.")

    @property
    def source(self) -> str:
        """The pre-training dataset."""
        return self.pretrain_data or self.data

    @property
    def folder(self) -> Path:
        return Path(self.results_dir) / self.name

    def bundle(self, dataset: str) -> Path:
        return Path(self.bundle_dir) / DATASETS[dataset][0]

    def split_file(self, dataset: str) -> Path:
        return self.folder / ("split.json" if dataset == self.data else f"split_{dataset}.json")

    def overrides(self, dataset: str) -> dict[str, Any]:
        """Overrides shared by every bundle run on ``dataset``: folders, split file, device and ``preset.common``."""
        subdir = DATASETS[dataset][1]
        out: dict[str, Any] = {
            "bundle_root": str(self.bundle(dataset)),
            "work_dir": str(self.folder),
            "split_file": str(self.split_file(dataset)),
        }
        if subdir is not None:
            out["dataset_dir"] = str(Path(self.data_root) / subdir)
        if self.preset.device is not None:
            out["device"] = f"$torch.device({self.preset.device!r})"
        out.update(self.preset.common)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "data": self.data,
            "pretrain_data": self.source,
            "data_root": str(self.data_root),
            "results_dir": str(self.results_dir),
            "bundle_dir": str(self.bundle_dir),
            "test_root": None if self.test_root is None else str(self.test_root),
            "preset": dataclasses.asdict(self.preset),
        }


@dataclass
class PretrainCell:
    """The pre-training of one method (shared by all its fine-tuning cells)."""

    method: str
    bundle: Path
    overrides: dict[str, Any]

    @property
    def folder(self) -> Path:
        return Path(self.overrides["work_dir"]) / "pretrain" / self.method

    @property
    def label(self) -> str:
        return f"pretrain {self.method}"


@dataclass
class FinetuneCell:
    """One fine-tuning run (method, L, labelled draw, seed) and its evaluations, one per test set."""

    method: str
    num_labeled: int
    draw: int
    seed: int
    repeat: int
    bundle: Path
    train_overrides: dict[str, Any]
    eval_overrides: dict[str, dict[str, Any]]
    pretrain: PretrainCell | None

    @property
    def folder(self) -> Path:
        return Path(self.train_overrides["output_dir"])

    @property
    def label(self) -> str:
        return f"finetune {self.folder.name}"

    def dice_file(self, test_set: str) -> Path:
        return Path(self.eval_overrides[test_set]["eval_dir"]) / "dice.json"

    def finished(self) -> bool:
        return all(self.dice_file(t).exists() for t in self.eval_overrides)


def _bundle_config(bundle: Path, config: str) -> dict[str, Any]:
    return json.loads((bundle / "configs" / f"{config}.json").read_text())


def plan_cells(experiment: Experiment) -> tuple[list[PretrainCell], list[FinetuneCell]]:
    """
    The cells of an experiment: one pre-training per method that has one (shared by the methods fine-tuning its
    encoder), and one fine-tuning cell per (method, L, draw, seed); repeat r = draw * seeds_per_draw + k uses seed r.
    Draws and seeds are the same for every method, so the comparisons are paired. Methods that need a meta label
    the pre-training dataset lacks are left out with a warning (the paper's "/" cells).
    """
    preset = experiment.preset
    source_bundle = experiment.bundle(experiment.source)
    dataset_meta = _bundle_config(source_bundle, "pretrain")["meta_labels"]
    pretrain: dict[str, PretrainCell] = {}
    methods = []
    for name in preset.methods:
        owner = METHODS[name].pretrain_method
        if owner is not None and owner not in pretrain:
            try:
                method_overrides = METHODS[owner].pretrain_overrides(dataset_meta)
            except UnsupportedMethod as error:
                logger.warning("Leaving out %s: %s", name, error)
                continue
            overrides = {**experiment.overrides(experiment.source), **preset.pretrain, **method_overrides}
            pretrain[owner] = PretrainCell(owner, source_bundle, overrides)
        methods.append(name)

    bundle = experiment.bundle(experiment.data)
    finetune = dict(preset.finetune)
    external = f"$gcl_monai.data.load_datalist({str(experiment.test_root)!r}, dataset=@dataset)"
    finetune_cells = []
    for name in methods:
        method = METHODS[name]
        owner = method.pretrain_method
        for num_labeled in preset.num_labeled:
            for draw in range(preset.repeats):
                for k in range(preset.seeds_per_draw):
                    # one seed per repeat: repeats differ even when the pool allows a single labelled subset
                    seed = repeat = draw * preset.seeds_per_draw + k
                    folder = experiment.folder / "finetune" / f"{name}_L{num_labeled}_d{draw}_s{seed}"
                    train = {
                        **experiment.overrides(experiment.data),
                        **finetune,
                        "init": owner or "random",
                        "num_labeled": num_labeled,
                        "draw": draw,
                        "seed": seed,
                        "freeze_encoder": method.freeze_encoder,
                        "output_dir": str(folder),
                        "ckpt_dir": str(folder / "models"),
                    }
                    if owner is not None:
                        train["pretrained_path"] = str(pretrain[owner].folder / "encoder.pt")
                    evaluate = {
                        **experiment.overrides(experiment.data),
                        "ckpt_path": str(folder / "models" / "model.pt"),
                        "eval_dir": str(folder / "eval"),
                    }
                    evals = {INTERNAL_TEST: evaluate}
                    if experiment.test_root is not None:
                        external_eval = {"eval_dir": str(folder / "eval_external"), "test_data": external}
                        evals[EXTERNAL_TEST] = {**evaluate, **external_eval}
                    finetune_cells.append(
                        FinetuneCell(
                            method=name,
                            num_labeled=num_labeled,
                            draw=draw,
                            seed=seed,
                            repeat=repeat,
                            bundle=bundle,
                            train_overrides=train,
                            eval_overrides=evals,
                            pretrain=pretrain[owner] if owner else None,
                        )
                    )
    return list(pretrain.values()), finetune_cells


def execution_order(pretrain: list[PretrainCell], finetune: list[FinetuneCell]) -> list[PretrainCell | FinetuneCell]:
    """Fine-tuning from random initialisation first (it times a fine-tuning cell early), then each pre-training
    followed by the fine-tuning cells that use it."""
    order: list[PretrainCell | FinetuneCell] = [c for c in finetune if c.pretrain is None]
    for cell in pretrain:
        order.append(cell)
        order.extend(c for c in finetune if c.pretrain is cell)
    return order


# ------------------------------------------------------------------------------------------------ bundle glue


def run_bundle(bundle: Path, config: str, run_id: str, overrides: Mapping[str, Any]) -> None:
    """``monai.bundle.run`` of ``<bundle>/configs/<config>.json`` with ``overrides``."""
    configs = Path(bundle) / "configs"
    logger.debug("monai.bundle.run(%r, config_file=%s, %s)", run_id, configs / f"{config}.json", dict(overrides))
    try:
        monai.bundle.run(
            run_id,
            meta_file=str(configs / "metadata.json"),
            config_file=str(configs / f"{config}.json"),
            logging_file=str(configs / "logging.conf"),
            **overrides,
        )
    finally:
        gc.collect()


def parse_bundle_item(bundle: Path, config: str, key: str, overrides: Mapping[str, Any]) -> Any:
    """One item of a bundle config, parsed with ``overrides`` (e.g. the split or the labelled subset)."""
    parser = ConfigParser()
    parser.read_config(str(Path(bundle) / "configs" / f"{config}.json"))
    parser.update(dict(overrides))
    return parser.get_parsed_content(key)


def _cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the exception of type ``kind`` it was raised from (bundle expressions wrap exceptions)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def read_status(folder: Path) -> dict[str, Any]:
    path = Path(folder) / STATUS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def write_status(folder: Path, status: Mapping[str, Any]) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    tmp = Path(folder) / (STATUS_FILE + ".tmp")
    tmp.write_text(json.dumps(dict(status), indent=1))
    os.replace(tmp, Path(folder) / STATUS_FILE)


def _config_value(cell: PretrainCell, key: str) -> Any:
    return cell.overrides[key] if key in cell.overrides else _bundle_config(cell.bundle, "pretrain")[key]


def tensorboard_collapse(
    tb_dir: Path, batch_size: int, window: int = 10, tol: float = 1e-3, min_std: float = 1e-3
) -> tuple[bool, float | None, float | None]:
    """
    Whether a finished pre-training ended collapsed, read from its TensorBoard scalars: over the last ``window``
    iterations, every image-wise loss ``img/*`` within ``tol`` of :math:`\\ln(2B - 1)` (all embeddings identical) or
    ``std/img`` below ``min_std``.

    Returns:
        (collapsed, final total loss, final ``std/img``), the last two averaged over the window (None if not logged).
    """
    scalars = read_scalars(tb_dir)

    def final(tag: str) -> float | None:
        return float(scalars[tag][1][-window:].mean()) if tag in scalars and len(scalars[tag][1]) else None

    chance = math.log(2 * batch_size - 1)
    # every logged value of the window near chance, not its mean (a noisy loss can average to ln(2B - 1))
    img = [scalars[t][1][-window:] for t in scalars if t.startswith("img/")]
    stuck = bool(img) and all(len(v) and float(abs(v - chance).max()) < tol for v in img)
    loss, std = final("loss"), final("std/img")
    return stuck or (std is not None and std < min_std), loss, std


# ------------------------------------------------------------------------------------------------ running cells


def pretrain_done(cell: PretrainCell) -> bool:
    """Finished with the requested number of epochs, or collapsed (a collapse is final: delete the folder to retry)."""
    status = read_status(cell.folder)
    if status.get("status") == "collapsed":
        return True
    return (
        status.get("status") == "finished"
        and status.get("epochs") == _config_value(cell, "epochs")
        and (cell.folder / "encoder.pt").exists()
    )


def run_pretrain(cell: PretrainCell) -> str:
    """Runs (or resumes) a pre-training; returns its status: ``finished``, ``collapsed`` or ``failed``."""
    status = read_status(cell.folder)
    epochs, batch_size = _config_value(cell, "epochs"), _config_value(cell, "batch_size")
    outcome, message = "failed", ""
    start = time.time()
    try:
        run_bundle(cell.bundle, "pretrain", "pretrain", cell.overrides)
        outcome = "finished"
    except Exception as error:  # reported in the CSV; the other methods still run
        collapse = _cause(error, RepresentationCollapse)
        if collapse is None:
            logger.exception("Pre-training %s failed.", cell.method)
        outcome, message = ("collapsed", str(collapse)) if collapse else ("failed", repr(error))
    finally:
        seconds = status.get("seconds", 0.0) + time.time() - start
        write_status(cell.folder, {"status": "interrupted", "seconds": seconds, "epochs": epochs})
    collapsed, loss, std = tensorboard_collapse(cell.folder / "tensorboard", batch_size)
    if outcome == "finished" and collapsed:
        outcome, message = "collapsed", f"final image-wise losses at ln(2B-1) or std/img {std} below 1e-3"
    if outcome == "collapsed":
        logger.error(
            "REPRESENTATION COLLAPSE in %s: %s. Its fine-tuning cells are reported as collapsed.", cell.method, message
        )
    write_status(
        cell.folder,
        {
            "status": outcome,
            "seconds": seconds,
            "epochs": epochs,
            "batch_size": batch_size,
            "final_loss": loss,
            "final_std": std,
            "message": message,
        },
    )
    return outcome


def labelled_subset(cell: FinetuneCell) -> list[dict]:
    """The labelled volumes of a fine-tuning cell, as the bundle draws them (its ``labeled`` item)."""
    return parse_bundle_item(cell.bundle, "train", "labeled", cell.train_overrides)


def resolve_iterations(cell: FinetuneCell, labelled: list[dict]) -> None:
    """With ``iterations_per_epoch`` None (the paper's epochs), one pass over the labelled slices per epoch."""
    if cell.train_overrides.get("iterations_per_epoch", 0) is None:
        slices = sum(num_slices(item) for item in labelled)
        cell.train_overrides["iterations_per_epoch"] = math.ceil(slices / cell.train_overrides["batch_size"])


def run_finetune(cell: FinetuneCell) -> str:
    """
    Fine-tunes (unless a previous run of the cell finished training) and evaluates on every test set without a
    ``dice.json``. A ``model.pt`` left by an interrupted fine-tuning is a partly trained model: it is retrained.
    """
    status = read_status(cell.folder)
    try:
        if not (status.get("trained") or status.get("status") == "finished"):
            resolve_iterations(cell, labelled_subset(cell))
            start = time.time()
            run_bundle(cell.bundle, "train", "run", cell.train_overrides)
            status["finetune_seconds"] = time.time() - start
            status["iterations"] = cell.train_overrides["epochs"] * cell.train_overrides["iterations_per_epoch"]
            status["trained"] = True
            write_status(cell.folder, status)
        for test_set, overrides in cell.eval_overrides.items():
            if not cell.dice_file(test_set).exists():
                start = time.time()
                run_bundle(cell.bundle, "evaluate", "run", overrides)
                status.setdefault("eval_seconds", {})[test_set] = time.time() - start
        status.update(status="finished", message="")
    except Exception as error:  # reported in the CSV; the other cells still run
        logger.exception("Fine-tuning cell %s failed.", cell.folder.name)
        status.update(status="failed", message=repr(error))
    write_status(cell.folder, status)
    return status["status"]


class Progress:
    """Logs ``cell i of n``, the elapsed time and an ETA from the mean duration of each kind of cell."""

    def __init__(self, cells: list[PretrainCell | FinetuneCell], durations: dict[str, list[float]]):
        self.cells = cells
        self.durations = durations
        self.start = time.time()

    @staticmethod
    def kind(cell: PretrainCell | FinetuneCell) -> str:
        return "pretrain" if isinstance(cell, PretrainCell) else "finetune"

    def eta(self, first_remaining: int) -> str:
        remaining: dict[str, int] = {}
        for cell in self.cells[first_remaining:]:
            remaining[self.kind(cell)] = remaining.get(self.kind(cell), 0) + 1
        seconds, unknown = 0.0, []
        for kind, count in remaining.items():
            if self.durations.get(kind):
                seconds += count * sum(self.durations[kind]) / len(self.durations[kind])
            else:
                unknown.append(f"{count} {kind}")
        text = _hms(seconds)
        return text + (f" + {', '.join(unknown)} cell(s) not yet timed" if unknown else "")

    def log(self, index: int, cell: PretrainCell | FinetuneCell, what: str, started: bool = False) -> None:
        """Logs cell ``index``; ``started``: the cell is about to run (the ETA includes it)."""
        logger.info(
            "[cell %d of %d] %s: %s (elapsed %s, ETA %s)",
            index + 1, len(self.cells), cell.label, what, _hms(time.time() - self.start),
            self.eta(index if started else index + 1),
        )

    def add(self, cell: PretrainCell | FinetuneCell, seconds: float) -> None:
        self.durations.setdefault(self.kind(cell), []).append(seconds)


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _past_durations(pretrain: list[PretrainCell], finetune: list[FinetuneCell]) -> dict[str, list[float]]:
    """Durations of the cells finished by earlier invocations, to seed the ETA."""
    durations: dict[str, list[float]] = {"pretrain": [], "finetune": []}
    for cell in pretrain:
        status = read_status(cell.folder)
        if status.get("status") == "finished":
            durations["pretrain"].append(status["seconds"])
    for cell in finetune:
        status = read_status(cell.folder)
        if status.get("status") == "finished" and "finetune_seconds" in status:
            durations["finetune"].append(status["finetune_seconds"] + sum(status.get("eval_seconds", {}).values()))
    return durations


# ------------------------------------------------------------------------------------------------ results


def _labelled_patients(cell: FinetuneCell) -> str:
    return ";".join(sorted({str(d.get("patient", d.get("patient_id"))) for d in labelled_subset(cell)}))


def collect_rows(experiment: Experiment, finetune: list[FinetuneCell]) -> list[dict[str, Any]]:
    """
    One row per fine-tuning run and test set found on disk, with ``status``: ``ok`` (with its Dice), ``collapsed``
    (the pre-training collapsed, so it was never fine-tuned: Dice NaN), ``pretrain_failed`` or ``failed`` (Dice
    NaN). Cells not run yet have no row.
    """
    rows = []
    for cell in finetune:
        cell_status = read_status(cell.folder)
        pre = read_status(cell.pretrain.folder) if cell.pretrain is not None else {}
        pre_status = {"collapsed": "collapsed", "failed": "pretrain_failed"}.get(pre.get("status"))
        if pre_status is None and not cell_status and not cell.finished():
            continue
        patients = _labelled_patients(cell)
        message = pre.get("message", "") if pre_status else cell_status.get("message", "")
        for test_set in cell.eval_overrides:
            dice_file = cell.dice_file(test_set)
            summary = json.loads(dice_file.read_text()) if dice_file.exists() and pre_status is None else {}
            status = pre_status or ("ok" if summary else "failed")
            row = {
                "dataset": experiment.data,
                "pretrain_dataset": experiment.source if cell.pretrain is not None else "none",
                "method": cell.method,
                "num_labeled": cell.num_labeled,
                "repeat": cell.repeat,
                "draw": cell.draw,
                "seed": cell.seed,
                "test_set": test_set,
                "dice": summary.get("dice", math.nan),
                **{f"dice_{k}": v for k, v in summary.get("dice_per_class", {}).items()},
                "status": status,
                "labelled_patients": patients,
                "num_test_volumes": summary.get("num_volumes", ""),
                "pretrain_seconds": round(pre.get("seconds", 0.0), 1),
                "finetune_seconds": round(cell_status.get("finetune_seconds", math.nan), 1),
                "eval_seconds": round(cell_status.get("eval_seconds", {}).get(test_set, math.nan), 1),
                "finetune_iterations": cell_status.get("iterations", ""),
                "pretrain_final_loss": pre.get("final_loss", ""),
                "pretrain_final_std": pre.get("final_std", ""),
                "preset": experiment.preset.name,
                "run_dir": str(cell.folder),
                "message": message if status != "ok" else "",
            }
            rows.append(row)
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """Writes ``rows`` (columns in first-seen order; per-class columns after ``dice``)."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    first = [c for c in columns if not c.startswith("dice_")]
    index = first.index("dice") + 1 if "dice" in first else len(first)
    columns = first[:index] + [c for c in columns if c.startswith("dice_")] + first[index:]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------------------------------ experiment


def _check_plan(experiment: Experiment) -> None:
    """Refuses to mix settings in one experiment folder (only methods, L, repeats and seeds may change)."""
    path = experiment.folder / "plan.json"
    if not path.exists():
        return
    stored = json.loads(path.read_text())
    ours = json.loads(json.dumps(experiment.to_dict()))
    free = ("methods", "num_labeled", "repeats", "seeds_per_draw", "name")
    for key in ("data", "pretrain_data", "test_root"):
        if stored.get(key) != ours[key]:
            raise ValueError(f"{path}: {key} was {stored.get(key)!r}, now {ours[key]!r}; use another --name.")
    for key, value in ours["preset"].items():
        if key not in free and stored["preset"].get(key) != value:
            raise ValueError(
                f"{path}: preset {key} was {stored['preset'].get(key)!r}, now {value!r}; results of different settings "
                "must not be mixed: use another --name."
            )


def write_plan(experiment: Experiment, pretrain: list[PretrainCell], finetune: list[FinetuneCell]) -> Path:
    plan = {
        **experiment.to_dict(),
        "cuts": preset_cuts(experiment.preset),
        "methods": list(dict.fromkeys(c.method for c in finetune)),
        "labels": {m: METHODS[m].label for m in experiment.preset.methods},
        "pretrain": {c.method: {"bundle": str(c.bundle), "overrides": c.overrides} for c in pretrain},
    }
    path = experiment.folder / "plan.json"
    path.write_text(json.dumps(plan, indent=1))
    return path


def describe_header(experiment: Experiment, num_cells: int) -> list[str]:
    """The experiment in a few lines, with what its preset cuts relative to the paper."""
    lines = [f"Experiment {experiment.name}: preset {experiment.preset.name}, fine-tune and test on {experiment.data}, "
             f"pre-train on {experiment.source}; {num_cells} cells in {experiment.folder}"]
    cuts = preset_cuts(experiment.preset)
    lines.append("What this preset cuts relative to the paper:" if cuts else "The paper's protocol, nothing cut.")
    lines.extend(f"  - {c}" for c in cuts)
    return lines


def describe(experiment: Experiment, cells: list[PretrainCell | FinetuneCell]) -> str:
    """The plan as text: the header, the overrides shared by each stage, then every cell with its own overrides."""
    lines = describe_header(experiment, len(cells))
    shared = {
        "pretrain.json": {**experiment.overrides(experiment.source), **experiment.preset.pretrain},
        "train.json": {**experiment.overrides(experiment.data), **experiment.preset.finetune},
        "evaluate.json": experiment.overrides(experiment.data),
    }
    lines += [f"Overrides of every {config} run: {overrides}" for config, overrides in shared.items()]

    def own(overrides: Mapping[str, Any], config: str) -> dict[str, Any]:
        return {k: v for k, v in overrides.items() if k not in shared[config] or shared[config][k] != v}

    for i, cell in enumerate(cells):
        if isinstance(cell, PretrainCell):
            done = " [done]" if pretrain_done(cell) else ""
            overrides = own(cell.overrides, "pretrain.json")
            lines.append(f"{i + 1:4d}. {cell.label}{done}: {cell.bundle.name} pretrain.json {overrides}")
        else:
            done = " [done]" if cell.finished() else ""
            overrides = own(cell.train_overrides, "train.json")
            lines.append(f"{i + 1:4d}. {cell.label}{done}: {cell.bundle.name} train.json {overrides}")
            for test_set, overrides in cell.eval_overrides.items():
                lines.append(f"        then evaluate.json ({test_set}) {own(overrides, 'evaluate.json')}")
    return "\n".join(lines)


@contextmanager
def _log_to(path: Path) -> Iterator[None]:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


def run_experiment(experiment: Experiment, dry_run: bool = False) -> Path | None:
    """
    Runs every cell not finished yet, then writes ``results.csv``, ``table.md`` and the plots.

    Args:
        experiment: the experiment.
        dry_run: only print the plan (cells and overrides).

    Returns:
        the path of ``results.csv`` (None for a dry run).
    """
    pretrain, finetune = plan_cells(experiment)
    cells = execution_order(pretrain, finetune)
    if dry_run:
        print(describe(experiment, cells))
        return None
    _check_plan(experiment)
    experiment.folder.mkdir(parents=True, exist_ok=True)
    write_plan(experiment, pretrain, finetune)
    with _log_to(experiment.folder / "progress.log"):
        logger.info("%s", "\n".join(describe_header(experiment, len(cells))))
        # the split files first: every method then reads the same patients
        for dataset, config in ((experiment.data, "train"), (experiment.source, "pretrain")):
            parse_bundle_item(experiment.bundle(dataset), config, "split", experiment.overrides(dataset))
        progress = Progress(cells, _past_durations(pretrain, finetune))
        for index, cell in enumerate(cells):
            if isinstance(cell, PretrainCell) and pretrain_done(cell):
                progress.log(index, cell, f"already {read_status(cell.folder)['status']}, skipped")
                continue
            if isinstance(cell, FinetuneCell) and cell.finished():
                progress.log(index, cell, "already finished, skipped")
                continue
            if isinstance(cell, FinetuneCell) and cell.pretrain is not None:
                pre = read_status(cell.pretrain.folder).get("status")
                if pre != "finished":
                    progress.log(index, cell, f"skipped: its pre-training is {pre or 'missing'}")
                    continue
            progress.log(index, cell, "starting", started=True)
            start = time.time()
            outcome = run_pretrain(cell) if isinstance(cell, PretrainCell) else run_finetune(cell)
            if outcome == "finished":
                progress.add(cell, time.time() - start)
            progress.log(index, cell, f"{outcome} in {_hms(time.time() - start)}")
            write_csv(collect_rows(experiment, finetune), experiment.folder / "results.csv")
        csv_path = write_csv(collect_rows(experiment, finetune), experiment.folder / "results.csv")
        write_report(experiment.folder)
        logger.info("Results in %s; table in %s.", csv_path, experiment.folder / "table.md")
    return csv_path
