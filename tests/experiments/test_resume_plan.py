"""benchmarks/resume_plan.py: a plan's queue carried to a new machine skips exactly the jobs whose rows main holds
in full, starts the others over without their lost rows, and brings back only finished jobs' rows, in place of a
lost try's; benchmarks/finetune_curves.py's ``times`` keeps the rows of runs whose logs are gone."""

import csv
import json
import subprocess

import pytest

from benchmarks.finetune_curves import times
from benchmarks.resume_plan import Job, collect, cpu_jobs, merged, model_runs, prepare

RUNS = ["f0_fewlabel_L2_d0_s0", "f0_fewlabel_L2_d1_s0", "f1_fewlabel_L2_d0_s0"]
MODELS = ["m0", "m1", "m2"]
CURVE_FIELDS = ["fold", "recipe", "labeled", "draw", "seed", "iteration", "val_dice", "finetune_iterations"]
TIME_FIELDS = ["run", "epoch", "iterations", "seconds", "validation_seconds", "seconds_per_iteration"]
DICE_FIELDS = ["model", "scoring", "dice"]


def _write(path, fields, rows, ending="\n"):
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator=ending)
        writer.writerow(fields)
        writer.writerows(rows)


def _rows(path):
    with path.open() as f:
        return [list(r.values()) for r in csv.DictReader(f)]


def _git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _curve(run, iteration, dice):
    fold, draw = run[1], run.split("_d")[1][0]
    return [fold, "fewlabel", "2", draw, "0", str(iteration), dice, "1500"]


@pytest.fixture
def checkout(tmp_path):
    """A repository whose plan lists 3 CPU jobs (worktree ``wt``) and a GPU model; committed, then main's rows:
    job 0 finished (scored on both splits), job 1 half-scored with a lost try's times, job 2 not started."""
    repo = tmp_path / "main"
    plan = repo / "docs" / "results" / "gate"
    plan.mkdir(parents=True)
    rows = [[m, "L2", f"wt/docs/results/gate/runs/{r}", r[1]] for m, r in zip(MODELS, RUNS)]
    _write(plan / "models.csv", ["model", "set", "run_dir", "fold"], [*rows, ["g0", "L2_gpu", "train/x/runs/y", "0"]])
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "plan")
    commit = _git(repo, "rev-parse", "HEAD")
    curves = [_curve(RUNS[0], 250, "0.5"), _curve(RUNS[0], 500, "0.6")]
    _write(plan / "curves.csv", CURVE_FIELDS, curves, ending="\r\n")  # as the driver writes it: the csv module's
    _write(
        plan / "times.csv",
        TIME_FIELDS,
        [[RUNS[0], "1", "50", "100.0", "0.0", "2.0"], [RUNS[1], "1", "50", "300.0", "0.0", "6.0"]],
    )
    _write(plan / "dice_val.csv", DICE_FIELDS, [["m0", "bilinear", "0.5"], ["g0", "bilinear", "0.4"]])
    _write(plan / "dice_test.csv", DICE_FIELDS, [["m0", "bilinear", "0.55"], ["m1", "bilinear", "0.6"]])
    return repo, plan, commit, tmp_path / "root"


def test_cpu_jobs_are_the_models_in_the_plans_worktree_in_order(checkout):
    _, plan, _, _ = checkout
    assert cpu_jobs(plan) == ("wt", [Job(i, m, r) for i, (m, r) in enumerate(zip(MODELS, RUNS))])
    two = [["a", "L2", "wt/docs/results/gate/runs/x"], ["b", "L2", "other/docs/results/gate/runs/y"]]
    _write(plan / "models.csv", ["model", "set", "run_dir"], two)
    with pytest.raises(SystemExit, match="one worktree"):
        cpu_jobs(plan)
    _write(plan / "models.csv", ["model", "set", "run_dir"], two[:1])
    assert cpu_jobs(plan) == ("wt", [Job(0, "a", "x")])
    gate = plan.parent / "gate-fullsup"  # another plan scores this plan's run: its rows there would not be carried
    gate.mkdir()
    _write(gate / "models.csv", ["model", "set", "run_dir"], [["a", "it5000", "wt/docs/results/gate/runs/x"]])
    with pytest.raises(SystemExit, match=r"also models of \['gate-fullsup'\]"):
        cpu_jobs(plan)


def test_prepare_skips_the_jobs_main_holds_and_starts_the_others_without_their_lost_rows(checkout):
    repo, plan, commit, root = checkout
    root.mkdir()
    with pytest.raises(SystemExit, match="rev-parse --verify 0000000"):
        prepare(plan, "0000000", root, repo=repo)
    assert not (root / "wt").exists()
    wt_plan, finished = prepare(plan, commit[:7], root, repo=repo)
    assert wt_plan == root / "wt" / "docs" / "results" / "gate"
    assert _git(root / "wt", "rev-parse", "HEAD") == commit
    assert finished == [Job(0, "m0", RUNS[0])]  # m1 has no validation row: not finished
    claims = wt_plan / "runs" / "claims"
    assert sorted(p.name for p in claims.iterdir()) == ["0"] and (claims / "0" / "done").is_file()
    assert (wt_plan / "curves.csv").read_bytes() == (plan / "curves.csv").read_bytes()  # its line endings too
    assert _rows(wt_plan / "times.csv") == [[RUNS[0], "1", "50", "100.0", "0.0", "2.0"]]  # job 1's lost try gone
    assert _rows(wt_plan / "dice_val.csv") == [["m0", "bilinear", "0.5"], ["g0", "bilinear", "0.4"]]  # GPU row kept
    assert _rows(wt_plan / "dice_test.csv") == [["m0", "bilinear", "0.55"]]

    # the machine outlived the session: the worktree is left as it is, its own claims decide
    (claims / "1").mkdir()
    (claims / "1" / "done").touch()
    (wt_plan / "times.csv").write_text("kept\n")
    assert prepare(plan, commit, root, repo=repo)[1] == [Job(0, "m0", RUNS[0]), Job(1, "m1", RUNS[1])]
    assert (wt_plan / "times.csv").read_text() == "kept\n"
    _write(repo / "later.txt", ["x"], [])
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "later")
    with pytest.raises(SystemExit, match="not at the plan's commit"):
        prepare(plan, "HEAD", root, repo=repo)


def _log_line(engine, epoch, taken):
    stamp = "2026-12-06 00:30:00,000"
    return f"{stamp} - ignite.engine.engine.{engine} - INFO - Epoch[{epoch}] Complete. Time taken: {taken}\n"


def test_collect_brings_back_finished_jobs_only_in_place_of_a_lost_try(checkout):
    repo, plan, commit, root = checkout
    root.mkdir()
    wt_plan, _ = prepare(plan, commit, root, repo=repo)
    run = wt_plan / "runs" / RUNS[1]  # job 1 trains here: 2 epochs of 50 iterations, validated after the second
    (run / "model").mkdir(parents=True)
    (run / "command.json").write_text(json.dumps(["run", "--iterations_per_epoch", "50"]))
    log = _log_line("SemiSupervisedTrainer", 1, "00:01:15.000")
    log += _log_line("SupervisedEvaluator", 1, "00:00:05.000") + _log_line("SemiSupervisedTrainer", 2, "00:01:20.000")
    (run / "log.txt").write_text(log)
    with (wt_plan / "curves.csv").open("a", newline="") as f:
        csv.writer(f, lineterminator="\r\n").writerow(_curve(RUNS[1], 100, "0.7"))
    for split, dice in (("val", "0.61"), ("test", "0.62")):
        with (wt_plan / f"dice_{split}.csv").open("a") as f:
            csv.writer(f, lineterminator="\n").writerows([["m1", "bilinear", dice], ["m2", "bilinear", "0.9"]])

    before = {p.name: p.read_bytes() for p in plan.glob("*.csv")}
    assert collect(plan, root, repo=repo) == {"curves.csv": 0, "times.csv": 0, "dice_test.csv": 0, "dice_val.csv": 0}
    assert {p.name: p.read_bytes() for p in plan.glob("*.csv")} == before  # job 1 is not done yet: nothing moves

    (wt_plan / "runs" / "claims" / "1").mkdir()
    (wt_plan / "runs" / "claims" / "1" / "done").touch()
    assert collect(plan, root, repo=repo) == {"curves.csv": 1, "times.csv": 2, "dice_test.csv": 1, "dice_val.csv": 1}
    assert _rows(plan / "curves.csv")[-1] == _curve(RUNS[1], 100, "0.7")
    assert (plan / "curves.csv").read_bytes().count(b"\r\n") == 4  # the header and 3 rows, each as it was
    # job 1's lost try (300 s) replaced in its place by this machine's epochs: 75 s, then (80 - 5) s
    assert _rows(plan / "times.csv") == [
        [RUNS[0], "1", "50", "100.0", "0.0", "2.0"],
        [RUNS[1], "1", "50", "75.0", "0.0", "1.5"],
        [RUNS[1], "2", "50", "80.0", "5.0", "1.5"],
    ]
    assert _rows(plan / "dice_val.csv") == [
        ["m0", "bilinear", "0.5"],
        ["g0", "bilinear", "0.4"],
        ["m1", "bilinear", "0.61"],
    ]
    assert _rows(plan / "dice_test.csv") == [["m0", "bilinear", "0.55"], ["m1", "bilinear", "0.62"]]  # m2: not done
    assert collect(plan, root, repo=repo) == {"curves.csv": 0, "times.csv": 0, "dice_test.csv": 0, "dice_val.csv": 0}


def test_merged_replaces_a_runs_rows_in_place_and_appends_a_new_run():
    jobs = [Job(0, "a", "ra"), Job(1, "b", "rb"), Job(2, "c", "rc")]
    main_rows = [{"run": "ra", "e": "1"}, {"run": "x", "e": "1"}, {"run": "ra", "e": "2"}, {"run": "rb", "e": "9"}]
    rows = [{"run": "rc", "e": "1"}, {"run": "ra", "e": "1"}, {"run": "ra", "e": "3"}, {"run": "rb", "e": "5"}]
    by_model = model_runs(jobs)
    assert by_model == {"a": "ra", "b": "rb", "c": "rc"}
    assert merged(main_rows, rows, {"ra", "rc"}, by_model) == [
        {"run": "ra", "e": "1"}, {"run": "ra", "e": "3"}, {"run": "x", "e": "1"}, {"run": "rb", "e": "9"},
        {"run": "rc", "e": "1"},
    ]  # fmt: skip
    assert merged(main_rows, [], {"ra"}, by_model) == main_rows  # no row of it here: main's are kept
    dice = [{"model": "a", "dice": "0.1"}, {"model": "g", "dice": "0.2"}]  # "g": no CPU job's model, kept
    assert merged(dice, [{"model": "a", "dice": "0.3"}], {"ra"}, by_model) == [
        {"model": "a", "dice": "0.3"}, {"model": "g", "dice": "0.2"},
    ]  # fmt: skip


def test_times_keeps_the_rows_of_runs_whose_logs_are_gone(tmp_path):
    _write(tmp_path / "times.csv", TIME_FIELDS, [["gone", "1", "50", "100.0", "0.0", "2.0"],
                                                 ["zrun", "1", "50", "999.0", "0.0", "19.98"]])  # fmt: skip
    run = tmp_path / "runs" / "zrun"
    run.mkdir(parents=True)
    (run / "command.json").write_text(json.dumps(["run", "--iterations_per_epoch", "50"]))
    (run / "log.txt").write_text(_log_line("SemiSupervisedTrainer", 1, "00:01:40.000"))
    assert _rows(times(tmp_path)) == [
        ["gone", "1", "50", "100.0", "0.0", "2.0"],
        ["zrun", "1", "50", "100.0", "0.0", "2.0"],  # a logged run's rows are its log's
    ]
