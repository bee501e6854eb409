"""docs/results/gate-random_{acdc,prostate}/run.sh: each plan's 20 jobs are the runs that its models.csv lists
(fold, L, draw, seed 0: the folds' own; recipe and width; the dataset's bundle), L = 2 first, each scored as it
ends (validation, then the test patients) before the next starts, and neither starts without round 10's width.
``python`` is a stand-in that logs the arguments of every command."""

import csv
import subprocess
from pathlib import Path

import pytest

from tests.experiments.drivers import ARGUMENT_LOGGER, run_driver

REPO = Path(__file__).resolve().parents[2]
PLANS = {
    "acdc": (REPO / "docs/results/gate-random_acdc", []),
    "prostate": (
        REPO / "docs/results/gate-random_prostate",
        ["--bundle", "gcl_prostate", "--base-split", "docs/results/cpu-mini_prostate/split.json"],
    ),
}
SCORED = {"acdc": ("acdc", []), "prostate": ("prostate", ["--bundle", "bundles/gcl_prostate"])}


def _run(tmp_path: Path, plan: Path, width: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp_path / "out").mkdir(exist_ok=True)
    cmd = ["bash", str(plan / "run.sh"), "A"]
    return run_driver(tmp_path, ARGUMENT_LOGGER, cmd, OUT=str(tmp_path / "out"), WIDTH=width)


def _value(args: list[str], key: str) -> str:
    return args[args.index(key) + 1]


@pytest.mark.parametrize("dataset", sorted(PLANS))
@pytest.mark.parametrize(
    ("width", "features", "recipe"),
    [("default", "[16,32,64,128,256,16]", "fewlabel"), ("paper", "[32,64,128,256,512,32]", "fewlabel_width512")],
)
def test_the_jobs_are_the_runs_of_models_csv(tmp_path, dataset, width, features, recipe):
    plan, bundle = PLANS[dataset]
    proc, lines = _run(tmp_path, plan, width)
    assert proc.returncode == 0
    commands = [line.split() for line in lines]
    calls = commands[0::3]  # each job: its training, then its two scorings
    assert all(a[:2] == ["-m", "benchmarks.finetune_curves"] for a in calls)
    folders = [
        f"f{_value(a, '--fold')}_{_value(a, '--recipe')}_L{_value(a, '--labeled')}_d{_value(a, '--draw')}_s0"
        for a in calls
    ]  # the run folder benchmarks/finetune_curves.py makes of them
    with (plan / "models.csv").open() as f:
        listed = [  # the CPU sets (a GPU set, `_gpu`, runs on benchmarks/gpu_queue.sh)
            Path(row["run_dir"]).name.replace("fewlabel", recipe)
            for row in csv.DictReader(f)
            if not row["set"].endswith("_gpu")
        ]
    assert folders == listed and len(set(folders)) == 20  # L = 2 first, as models.csv
    for args in calls:
        assert "--seed" not in args  # the driver's default, 0: the seed also decides the folds
        assert args[2 : 2 + len(bundle)] == bundle and ("--bundle" in args) == bool(bundle)  # the dataset's
        assert _value(args, "--features") == features and _value(args, "--iterations") == "1500"
        assert _value(args, "--val-every") == "250" and _value(args, "--batch_size") == "20"
        assert _value(args, "--amp") == "False" and _value(args, "--checkpoint-every") == "50"
    data_dir, score_args = SCORED[dataset]
    for i, folder in enumerate(folders):
        for split, args in zip(("val", "test"), commands[3 * i + 1 : 3 * i + 3]):
            assert args[:4] == ["-m", "benchmarks.score_val", "score", str(tmp_path / "out")]
            assert args[4 : 4 + len(score_args)] == score_args and _value(args, "--split") == split
            assert _value(args, "--run") == folder and _value(args, "--runs-root") == ".."
            assert _value(args, "--data-dir") == f"../shared/data/{data_dir}"
            assert _value(args, "--scoring") == 'bilinear={"pred_interp":'  # split at the space: the one scoring
            assert args.count("--scoring") == 1


@pytest.mark.parametrize("dataset", sorted(PLANS))
def test_no_width_no_run(tmp_path, dataset):
    proc, lines = _run(tmp_path, PLANS[dataset][0], "")
    assert proc.returncode == 2 and "WIDTH must be default or paper" in proc.stderr
    assert lines == []
