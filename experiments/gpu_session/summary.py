"""``report.md`` of a ``gpu-run``: the steps, the diagnosis, the speed figures and the comparison's table."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.gpu_session.state import RunState

__all__ = ["run_report", "speed_lines"]


#: pre-training iterations per epoch on ACDC at batch 48 (the 48 pre-training patients hold about 880 slices)
ACDC_ITERATIONS_PER_EPOCH = 880 / 48


def speed_lines(speed: dict[str, Any], pretrain_epochs: int | None = None) -> list[str]:
    """
    The speed benchmark's figures against the issue's GPU targets, one line each, and, given the budget's
    ``pretrain_epochs``, the time the two pre-trainings take at the measured speed (their iterations on the one
    GPU one after the other, :py:data:`ACDC_ITERATIONS_PER_EPOCH` per epoch; docs/gpu_run.md predicted it).
    """
    lines = [f"Device: {speed.get('device', '?')}, torch {speed.get('torch', '?')}."]
    variants = speed.get("variants", {})
    if "gcl" in variants and "simclr" in variants:
        gcl, simclr = variants["gcl"], variants["simclr"]
        lines += [
            (
                f"- SimCLR {simclr['median_s']:.4f} s / iteration, full GCL {gcl['median_s']:.4f} s: "
                f"{gcl['ratio_to_simclr']:.2f}x (target <= 2.5x)"
            ),
            (
                f"- full GCL: combine {100 * gcl['combine_share']:.1f}%, GradFilter "
                f"{100 * gcl['grad_filter_share']:.1f}% of an iteration (targets < 10% each)"
            ),
        ]
        if pretrain_epochs:
            per_epoch = ACDC_ITERATIONS_PER_EPOCH * (
                variants.get("gcl_views_on_device", gcl)["median_s"] + simclr["median_s"]
            )
            lines.append(
                f"- the two pre-trainings at this speed: {pretrain_epochs} epochs x {per_epoch:.2f} s = "
                f"{pretrain_epochs * per_epoch / 60:.1f} min of GPU time (docs/gpu_run.md predicts 2.6 s per epoch)"
            )
    consumption = speed.get("gcl_consumption_slices_per_s")
    for name, rate in speed.get("pipeline_slices_per_s", {}).items():
        against = f", {rate / consumption:.2f}x what full GCL consumes (target >= 1.5x)" if consumption else ""
        lines.append(f"- data pipeline ({name}): {rate:.0f} slices/s{against}")
    if "finetune" in speed:
        f = speed["finetune"]
        lines.append(
            f"- fine-tuning iteration (demo bundle, batch {f['batch_size']}"
            f"{', slices on the device' if f.get('on_device') else ''}"
            f"{', augmented as a batch' if f.get('batched_augmentation') else ''}): {f['bundle_s']:.4f} s, of which "
            f"waiting for the batch {f['loading_s']:.4f} s; bare step {f['bare_s']:.4f} s (target <= 0.030 s)"
        )
    return lines


def _tail(path: Path, lines: int) -> str:
    return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""


def run_report(
    work: Path,
    speed_path: Path | None,
    experiment_folder: Path | None,
    pretrain_epochs: int | None = None,
    cuts: Sequence[str] = (),
) -> str:
    """
    The Markdown report of the run so far.

    Args:
        work: the work folder.
        speed_path: the speed JSON (None or missing: not measured yet).
        experiment_folder: the comparison's folder (None or missing: not started yet).
        pretrain_epochs: the budget's pre-training epochs (the time they take at the measured speed is shown).
        cuts: what the budget changes from the paper's protocol, one line each.
    """
    state = RunState(work).read()
    out = [f"# gpu-run, budget `{state['budget']}`", ""]
    if state["stopped"]:
        out += [f"**Stopped: {state['stopped']}**", ""]
    out += ["| step | status | seconds | attempts | message |", "|---|---|---|---|---|"]
    for name, step in state["steps"].items():
        out.append(f"| {name} | {step['status']} | {step['seconds']:.0f} | {step['attempts']} | {step['message']} |")
    out += ["", f"Machines so far: {state['machines']}.", ""]
    if cuts:
        out += ["## What this budget changes from the paper", "", *[f"- {c}" for c in cuts], ""]
    if speed_path is not None and speed_path.exists():
        out += ["## Speed", "", *speed_lines(json.loads(speed_path.read_text()), pretrain_epochs), ""]
    diagnosis = Path(work) / "diagnose" / "report.md"
    if diagnosis.exists():
        # its headings two levels down, under this report's own
        body = re.sub(r"^#", "###", diagnosis.read_text(), flags=re.MULTILINE)
        out += ["## Diagnosis of the default recipe", "", body, ""]
    if experiment_folder is not None:
        table = experiment_folder / "table.md"
        if table.exists():
            out += ["## Comparison", "", table.read_text(), ""]
        progress = _tail(experiment_folder / "progress.log", 25)
        if progress:
            out += ["## Progress (last lines of progress.log)", "", "```", progress, "```", ""]
    return "\n".join(out)
