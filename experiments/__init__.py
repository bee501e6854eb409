"""
The quality harness: the paper's protocol (patient-level split, pre-training per method, fine-tuning with L labelled
patients over paired draws, test Dice) run through the bundles with overrides, and its report.

Command line: ``python -m experiments --help`` (see ``docs/benchmark.md``).
"""

from experiments.bundles import default_bundle_dir
from experiments.experiment import DATASETS, Experiment
from experiments.plan import plan_cells, plan_experiment
from experiments.presets import ALL_METHODS, METHODS, PRESETS, Method, Preset, get_preset, preset_cuts
from experiments.report import paired_difference, read_results, write_report
from experiments.runner import run_experiment
from experiments.study.power import detectable_difference, pairs_needed

__all__ = [
    "ALL_METHODS",
    "DATASETS",
    "METHODS",
    "PRESETS",
    "Experiment",
    "Method",
    "Preset",
    "default_bundle_dir",
    "detectable_difference",
    "get_preset",
    "paired_difference",
    "pairs_needed",
    "plan_cells",
    "plan_experiment",
    "preset_cuts",
    "read_results",
    "run_experiment",
    "write_report",
]
