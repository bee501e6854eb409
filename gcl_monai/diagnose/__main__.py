"""
Diagnose a pre-training recipe on real data:

    python -m gcl_monai.diagnose --config_file bundles/gcl_acdc/configs/pretrain.json --dataset_dir /data/acdc \\
        --iterations 112 --output_dir diagnose/gcl [--reference diagnose/simclr/summary.json] [--<key> <value> ...]

Runs the bundle's ``pretrain`` workflow (every ``--<key> <value>`` is a bundle override, as with
``python -m monai.bundle run``; values are Python literals) for ``--iterations`` iterations on the learning-rate
schedule of the configured epochs, from scratch (no resume), and writes into ``--output_dir``: ``report.md``
(per meta label: image-wise and pixel-wise loss trajectories against chance ln(2B - 1), ``std/img``, the mean
pairwise cosine of the image embeddings, GradMitigator's gradient cosines, EMA targets and how often it changed a
gradient, the verdict collapsed / stalled / training, and the label-free measures of the representation at the end:
effective rank, alignment and uniformity; how many positives of another image each meta label gives an anchor in a
batch), ``summary.json``, ``trajectory.csv`` and ``curves.png``.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import sys
from pathlib import Path

from monai.bundle import ConfigWorkflow

from gcl_monai.data import GroupedSampler
from gcl_monai.diagnose.embeddings import representation_measures
from gcl_monai.diagnose.positives import meta_label_positives, sampled_positives
from gcl_monai.diagnose.recorder import TrajectoryRecorder
from gcl_monai.diagnose.summary import summarise, write_diagnosis
from gcl_monai.handlers import RepresentationCollapse

logger = logging.getLogger("gcl_monai.diagnose")


def parse_overrides(tokens: list[str]) -> dict[str, object]:
    """``["--key", "value", "--flag=[None]"]`` -> ``{"key": value, "flag": [None]}``; values are Python literals
    where they parse as one, else strings.

    Raises:
        ValueError: when a token is not ``--key`` or a key has no value.
    """
    overrides: dict[str, object] = {}
    it = iter(tokens)
    for token in it:
        if not token.startswith("--") or len(token) == 2:
            raise ValueError(f"expected a bundle override '--key value', got {token!r}.")
        key, _, value = token[2:].partition("=")
        if not _:
            try:
                value = next(it)
            except StopIteration:
                raise ValueError(f"override --{key} has no value.") from None
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.diagnose", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_file", required=True, help="a bundle's pretrain.json")
    parser.add_argument("--output_dir", required=True, help="folder of the report (and of the run's outputs)")
    parser.add_argument("--iterations", type=int, default=None, help="stop after this many iterations")
    parser.add_argument("--reference", default=None, help="summary.json of a reference run (e.g. SimCLR)")
    parser.add_argument("--window", type=float, default=0.1, help="first/last window, fraction of the run")
    args, extra = parser.parse_known_args(argv)
    overrides = parse_overrides(extra)
    output_dir = Path(args.output_dir)
    overrides.setdefault("work_dir", str(output_dir / "run"))
    overrides["resume_ckpt"] = None
    logging.basicConfig(level=logging.INFO, stream=sys.stdout)

    workflow = ConfigWorkflow(config_file=args.config_file, workflow_type=None, run_id="pretrain", **overrides)
    workflow.initialize()
    trainer = workflow.parser.get_parsed_content("train#trainer")
    recorder = TrajectoryRecorder(args.iterations)
    recorder.attach(trainer)
    stopped = ""
    try:
        workflow.run()
    except RepresentationCollapse as err:
        stopped = f"CollapseDetector stopped the run: {err}\n\n"
    reference = json.loads(Path(args.reference).read_text()) if args.reference else None
    summary = summarise(recorder.rows, recorder.task_names, window_fraction=args.window, reference=reference)
    if stopped:
        summary.verdict = "collapsed (" + summary.verdict + ")"
    summary.representation = representation_measures(trainer)
    table = getattr(getattr(trainer.data_loader, "dataset", None), "slice_table", None)
    sampler = getattr(trainer.data_loader, "sampler", None)
    if table is not None and isinstance(sampler, GroupedSampler):  # batches of whole groups (--slices_per_patient)
        summary.positives = sampled_positives(table, trainer.meta_labels, summary.batch_size, sampler)
    elif table is not None:  # the bundles' shuffled DataLoader over a SliceDataset
        summary.positives = meta_label_positives(table, trainer.meta_labels, summary.batch_size)
    if "probe_dice" in trainer.state.metrics:  # the bundle's probe handler (--probe_interval N) ran
        summary.representation["probe_dice"] = float(trainer.state.metrics["probe_dice"])
    header = f"# Diagnosis: {args.config_file}\n\nOverrides: `{' '.join(extra) or 'none'}`\n\n{stopped}"
    report = write_diagnosis(output_dir, recorder.rows, summary, header=header)
    print(report.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
