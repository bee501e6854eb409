"""The CPU runs of rounds 9 and 10 and of the prostate full-supervision gate (their run.sh): each of the 5 jobs trains
the run that models.csv lists for its fold, checkpointed every 50 iterations, in the plan's precision, and is scored
as soon as it has trained (rounds 9 and 10: validation; the gate: validation, then the test patients) before the next
job starts. ``python`` is a stand-in that logs the arguments of every command."""

import csv
from pathlib import Path

import pytest

from tests.experiments.drivers import ARGUMENT_LOGGER, REPO, run_driver

# plan folder, the CPU set's worktree in models.csv, the scored splits, the dataset, score_val's bundle arguments,
# the scorings, the precision (--amp)
PLANS = {
    "round9": ("finetune-precision-r9_acdc", "ft53r9/", ["val"], "acdc", [], ["fullsup", "bilinear"], "True"),
    "round10": ("finetune-width-r10_acdc", "ft53r10/", ["val"], "acdc", [], ["bilinear"], "False"),
    "prostate_gate": (
        "gate-fullsup_prostate", "ftp1/", ["val", "test"], "prostate", ["--bundle", "bundles/gcl_prostate"],
        ["fullsup", "nearest"], "False",
    ),
}  # fmt: skip


def _value(args: list[str], key: str, default: str | None = None) -> str:
    return args[args.index(key) + 1] if default is None or key in args else default


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_job_trains_its_listed_run_and_scores_it_at_once(tmp_path, name):
    folder, worktree, splits, dataset, score_args, scorings, amp = PLANS[name]
    plan = REPO / "docs/results" / folder
    (tmp_path / "out").mkdir()
    cmd = ["bash", str(plan / "run.sh"), "A"]
    done, lines = run_driver(tmp_path, ARGUMENT_LOGGER, cmd, OUT=str(tmp_path / "out"), AMP="False")
    assert done.returncode == 0, done.stderr
    commands = [line.split() for line in lines]
    per_job = 1 + len(splits)
    assert len(commands) == 5 * per_job
    with (plan / "models.csv").open() as f:
        listed = [Path(r["run_dir"]).name for r in csv.DictReader(f) if r["run_dir"].startswith(worktree)]
    trained = []
    for i in range(5):
        train, *scores = commands[per_job * i : per_job * (i + 1)]
        assert train[:2] == ["-m", "benchmarks.finetune_curves"] and _value(train, "--fold") == str(i)
        assert _value(train, "--checkpoint-every") == "50" and _value(train, "--amp") == amp
        run = f"f{i}_{_value(train, '--recipe')}_L{_value(train, '--labeled')}_d{_value(train, '--draw', '0')}_s0"
        trained.append(run)  # the run folder benchmarks/finetune_curves.py makes of them
        for split, args in zip(splits, scores, strict=True):
            assert args[:4] == ["-m", "benchmarks.score_val", "score", str(tmp_path / "out")]
            assert args[4 : 4 + len(score_args)] == score_args
            assert ("--split" not in args and split == "val") or _value(args, "--split") == split
            assert _value(args, "--run") == run and _value(args, "--runs-root") == ".."
            assert _value(args, "--data-dir") == f"../shared/data/{dataset}"
            named = [args[j + 1].split("=")[0] for j, a in enumerate(args) if a == "--scoring"]
            assert named == scorings
    assert trained == listed


def test_round11_scores_each_run_on_validation_here_and_sealed_on_test_in_the_gates_folder(tmp_path):
    plan, gate = REPO / "docs/results/finetune-budget-r11_acdc", REPO / "docs/results/gate-fullsup_acdc"
    (tmp_path / "out").mkdir()
    cmd = ["bash", str(plan / "run.sh"), "A"]
    refused, _ = run_driver(tmp_path, ARGUMENT_LOGGER, cmd, OUT=str(tmp_path / "out"))
    assert refused.returncode != 0 and "AMP must be True or False" in refused.stderr  # the precision is round 9's
    done, lines = run_driver(tmp_path, ARGUMENT_LOGGER, cmd, OUT=str(tmp_path / "out"), GATE="GATE", AMP="True")
    assert done.returncode == 0, done.stderr
    commands = [line.split() for line in lines]
    assert len(commands) == 15
    listed = {}
    for path, set_name in ((plan, "it5000"), (gate, "grid192_it5000")):
        with (path / "models.csv").open() as f:
            listed[path] = [Path(r["run_dir"]).name for r in csv.DictReader(f) if r["set"] == set_name]
    assert listed[plan] == listed[gate]
    for i in range(5):
        train, val, test = commands[3 * i : 3 * (i + 1)]
        assert _value(train, "--fold") == str(i) and _value(train, "--iterations") == "5000"
        assert _value(train, "--checkpoint-every") == "50" and _value(train, "--amp") == "True"
        assert _value(train, "--image_size") == "[192,192]" and _value(train, "--batch_size") == "20"
        run = f"f{i}_{_value(train, '--recipe')}_Lfull_d0_s0"
        assert run == f"f{i}_batch20_grid192_it5000_bf16_Lfull_d0_s0"  # bfloat16 renames the run (an amendment)
        assert listed[plan][i] == run.replace("_bf16", "")
        assert val[3] == str(tmp_path / "out") and "--split" not in val and _value(val, "--run") == run
        assert test[3] == "GATE" and _value(test, "--split") == "test" and _value(test, "--run") == run
        for args, scorings in ((val, ["fullsup", "bilinear"]), (test, ["fullsup", "nearest"])):
            assert [args[j + 1].split("=")[0] for j, a in enumerate(args) if a == "--scoring"] == scorings
