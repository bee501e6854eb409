"""
The steps of ``gpu-run``, each through the project's existing tools:

1. ``speed``: ``benchmarks.bench_pretrain_iteration`` (SimCLR, full GCL, the combine and GradFilter shares, the
   loader against consumption, the fine-tuning iteration) -> ``speed_<device type>.json``;
2. ``diagnose``: ``gcl_monai.diagnose`` on the comparison's GCL pre-training (the bundle's default recipe at the
   budget's settings) for a few hundred iterations; a collapse, or an image branch whose every meta label stays at
   chance, stops the run with that verdict (:py:func:`verdict_stops`);
3. ``compare``: the benchmark harness (:py:func:`experiments.run_experiment`) with ``jobs`` cells at once
   on the one device: the SimCLR and GCL pre-trainings side by side (each resumes from its last epoch's
   checkpoint), the random-init cells beside them, every other fine-tuning cell once its encoder is done (a finished
   cell is never run again); ``results.csv`` and ``table.md`` in ``results/<experiment>/``.

Each step's output goes into the work folder; its console output into ``logs/<step>.log``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from monai.utils import optional_import

from experiments.bundles import default_bundle_dir
from experiments.cells import labelled_subset
from experiments.experiment import DATASETS, Experiment
from experiments.gpu_session.budget import GpuRunBudget
from experiments.plan import plan_cells
from experiments.report import read_results
from experiments.runner import run_experiment
from gcl_monai.bundle import ensure_phantom
from gcl_monai.data import load_split, save_split

__all__ = [
    "DATASET",
    "checkout_root",
    "data_root",
    "experiment",
    "finetune_patients",
    "relocate_splits",
    "run_compare",
    "run_diagnose",
    "run_speed",
    "speed_file",
    "verdict_stops",
]

logger = logging.getLogger("experiments")

#: the dataset of the comparison (the paper's Table 1, ACDC)
DATASET = "acdc"
#: in-plane size of the synthetic patients of a rehearsal (resized to the budget's image size by the bundles)
PHANTOM_SIZE = 48


def checkout_root() -> Path | None:
    """The source checkout holding ``benchmarks/`` (None for an installed package without it)."""
    root = Path(__file__).resolve().parents[2]  # <root>/experiments/gpu_session/steps.py
    return root if (root / "benchmarks" / "bench_pretrain_iteration.py").is_file() else None


def data_root(work: Path, budget: GpuRunBudget, given: str | None) -> Path:
    """
    The folder holding ``acdc/``: ``given``, else (for a budget with ``phantom_patients``) a synthetic ACDC-layout
    dataset generated in the work folder.

    Raises:
        FileNotFoundError: no ``acdc/`` under ``given``, or no data given to a budget that needs real data.
    """
    if given:
        if not (Path(given) / DATASETS[DATASET][1]).is_dir():
            raise FileNotFoundError(f"--data-root {given} holds no {DATASETS[DATASET][1]}/ folder.")
        return Path(given)
    if not budget.phantom_patients:
        raise FileNotFoundError(f"budget {budget.name!r} needs the ACDC data: give --data-root or $GCL_DATA_ROOT.")
    root = Path(work) / "data"
    ensure_phantom(root / DATASETS[DATASET][1], num_patients=budget.phantom_patients, image_size=PHANTOM_SIZE)
    return root


#: the parts of a split whose volumes every machine of a run must have: the validation and test patients (the
#: labelled ones may be a few of ``train`` and ``pretrain``: a payload cut to the fine-tuning's patients,
#: :py:func:`finetune_patients`, has only those)
REQUIRED_PARTS = ("val", "test")


def relocate_splits(work: Path, old: str, new: str) -> list[Path]:
    """
    Points the split files of a run resumed on another machine at this machine's copy of the data: every ``image``
    and ``label`` path under the dataset folder ``old`` is moved under ``new`` (the split files hold absolute
    paths; the patients, and so the comparison, stay the same).

    Args:
        work: the work folder.
        old: the dataset folder the split files were written with.
        new: this machine's dataset folder.

    Returns:
        the split files rewritten.

    Raises:
        FileNotFoundError: naming a validation or test volume (:py:data:`REQUIRED_PARTS`) that is not in ``new``.
    """
    old, new = str(Path(old)), str(Path(new))
    rewritten = []
    for path in sorted(Path(work).glob("results/*/split*.json")) + sorted(Path(work).glob("diagnose/run/split.json")):
        split = load_split(path)
        for part, entries in split.items():
            for entry in entries:
                for key in ("image", "label"):
                    value = entry.get(key)
                    if isinstance(value, str) and value.startswith(old + "/"):
                        entry[key] = new + value[len(old) :]
                        if part in REQUIRED_PARTS and not Path(entry[key]).exists():
                            raise FileNotFoundError(f"{path}: {entry[key]} is not in this machine's data ({new}).")
        save_split(split, path)
        rewritten.append(path)
    return rewritten


def finetune_patients(work: Path, budget: GpuRunBudget, data: Path) -> list[str]:
    """
    The patients whose volumes the comparison's fine-tuning and evaluation read: the validation and test patients
    of its split and every fine-tuning cell's labelled draw (as its bundle draws it). Once both pre-trainings are
    finished, a machine needs no other patient.

    Args:
        work: the work folder (its experiment's ``split.json`` written).
        budget: the run's budget.
        data: the folder holding ``acdc/``.
    """
    exp = experiment(work, budget, data)
    split = load_split(exp.folder / "split.json")
    patients = {entry["patient"] for part in REQUIRED_PARTS for entry in split[part]}
    for cell in plan_cells(exp)[1]:
        patients.update(entry["patient"] for entry in labelled_subset(cell))
    return sorted(patients)


def _run_logged(argv: list[str], log: Path, cwd: Path | None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(argv)}\n")
        handle.flush()
        return subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd, check=False).returncode


def speed_file(work: Path, budget: GpuRunBudget) -> Path:
    """``speed_cuda.json`` on a GPU, ``speed_cpu.json`` in a rehearsal."""
    return Path(work) / f"speed_{budget.device.split(':')[0]}.json"


def run_speed(work: Path, budget: GpuRunBudget) -> tuple[str, str]:
    """The speed benchmark; returns its status (``done``, ``skipped``, ``failed``) and a message."""
    root = checkout_root()
    if root is None:
        return "skipped", "benchmarks/ is not beside the package (an installed copy): run from a checkout"
    if not optional_import("nibabel")[1]:
        return "failed", (
            "nibabel is not installed: the loader benchmark writes its synthetic dataset as NIfTI (make the wheels "
            "with offline_payload wheels --with-nibabel)"
        )
    out = speed_file(work, budget)
    argv = [
        sys.executable,
        "-m",
        "benchmarks.bench_pretrain_iteration",
        "--device",
        budget.device,
        *budget.speed,
        "--note",
        f"gpu-run budget {budget.name}",
        "--out",
        str(out),
    ]
    code = _run_logged(argv, Path(work) / "logs" / "speed.log", cwd=root)
    if code != 0 or not out.exists():
        return "failed", f"exit code {code}, see logs/speed.log"
    return "done", out.name


def verdict_stops(summary: dict[str, Any]) -> str:
    """
    Why a diagnosis stops the run ("" when it does not): its verdict is a collapse, or not one meta label's
    image-wise loss ends below chance (the image branch learns nothing: no fine-tuning can show its effect). A
    stall of some meta labels while others learn is reported, not a reason to stop.

    Args:
        summary: ``summary.json`` of ``gcl_monai.diagnose`` (``verdict``; per meta label ``below_chance``).
    """
    verdict = summary["verdict"]
    if verdict.startswith("collapsed"):
        return f"the default recipe collapsed in the diagnosis ({verdict})"
    if not any(label["below_chance"] for label in summary["labels"].values()):
        return f"no image-wise loss of the default recipe fell below chance in the diagnosis ({verdict})"
    return ""


def run_diagnose(work: Path, budget: GpuRunBudget, data: Path) -> tuple[str, str, str]:
    """
    The diagnosis of the comparison's GCL pre-training.

    Returns:
        status (``done`` or ``failed``), the verdict, and why it stops the run ("" when it does not, or when the
        budget does not stop on a verdict).
    """
    out = Path(work) / "diagnose"
    config = default_bundle_dir() / DATASETS[DATASET][0] / "configs" / "pretrain.json"
    overrides = {
        **budget.diagnose_overrides(),
        "dataset_dir": str(data / DATASETS[DATASET][1]),
        "device": f"$torch.device({budget.device!r})",
    }
    argv = [
        sys.executable,
        "-m",
        "gcl_monai.diagnose",
        "--config_file",
        str(config),
        "--output_dir",
        str(out),
        "--iterations",
        str(budget.diagnose_iterations),
    ]
    for key, value in overrides.items():
        argv += [f"--{key}", value if isinstance(value, str) else repr(value)]
    code = _run_logged(argv, Path(work) / "logs" / "diagnose.log", cwd=checkout_root())
    if code != 0 or not (out / "summary.json").exists():
        return "failed", "", f"exit code {code}, see logs/diagnose.log"
    summary = json.loads((out / "summary.json").read_text())
    stop = verdict_stops(summary)
    if stop and not budget.stop_on_verdict:
        logger.warning("Budget %s does not stop on a verdict; a GPU run would stop here: %s", budget.name, stop)
        stop = ""
    return "done", summary["verdict"], stop


def experiment(work: Path, budget: GpuRunBudget, data: Path) -> Experiment:
    """The comparison, in ``<work>/results/gpu-<budget>_acdc``."""
    return Experiment(
        name=f"gpu-{budget.name}_{DATASET}",
        data=DATASET,
        preset=budget.preset(),
        data_root=Path(data).resolve(),
        results_dir=(Path(work) / "results").resolve(),
        bundle_dir=default_bundle_dir().resolve(),
    )


def run_compare(work: Path, budget: GpuRunBudget, data: Path) -> tuple[str, str]:
    """
    Pre-training and fine-tuning through the harness; returns ``done``, or ``failed`` when a cell failed (a later
    command runs the harness again, which retries only the failed and unfinished cells), and a message.
    """
    csv = run_experiment(experiment(work, budget, data), jobs=budget.jobs)
    failed = [r for r in read_results(csv) if r["status"] in ("failed", "pretrain_failed")]
    where = str(Path(csv).relative_to(Path(work).resolve()))
    if failed:
        return "failed", f"{len(failed)} result rows failed (message column of {where}); a later command retries them"
    return "done", where
