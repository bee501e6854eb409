"""The scorer of kept models: the evaluation command rebuilt from a run's training command, resumption, the rows,
and the paired reading computed by hand."""

import csv
import json
import math
import shutil
import sys

import pytest

import benchmarks.score_val as score_val
from benchmarks.score_val import arms, evaluation_command, level, main, paired, recipe_overrides

DRIVER = ["--init", "random", "--seed", "0", "--split_file", "s.json", "--work_dir", "w", "--output_dir", "w/model"]
DRIVER += ["--ckpt_dir", "w/released", "--num_workers", "0", "--progress_bar", "False", "--epochs", "5"]
DRIVER += ["--iterations_per_epoch", "500", "--val_interval", "1"]


def _train_command(*recipe):
    return [sys.executable, "-m", "monai.bundle", "run", "--config_file", "train.json", *DRIVER, *recipe]


def test_the_recipe_is_what_the_driver_did_not_set():
    assert recipe_overrides(_train_command("--features", "[32,64,128,256,512,32]")) == [
        "--features",
        "[32,64,128,256,512,32]",
    ]
    resumed = _train_command("--resume", "True", "--batch_size", "20", "--image_size", "[192,192]")
    assert recipe_overrides(resumed) == ["--batch_size", "20", "--image_size", "[192,192]"]
    assert recipe_overrides(_train_command("--labeled", "$@split['train']", "--num_labeled", "2")) == []
    with pytest.raises(ValueError, match="pairs after 'run'"):
        recipe_overrides(_train_command("--amp"))
    with pytest.raises(ValueError, match="not a 'monai.bundle run'"):
        recipe_overrides(["python", "-m", "benchmarks.finetune_curves"])


def _run(tmp_path, name="r", *recipe):
    run = tmp_path / "worktree" / name
    (run / "model").mkdir(parents=True)
    (run / "command.json").write_text(json.dumps(_train_command(*recipe)))
    (run / "model" / "model.pt").write_bytes(b"weights")
    return run


def test_the_evaluation_runs_as_trained_with_the_scorings_overrides(tmp_path):
    run = _run(tmp_path, "r", "--image_size", "[192,192]")
    command = evaluation_command(
        tmp_path / "b", run, tmp_path / "e", {"pred_interp": "bilinear", "mirror_axes": [0, 1]}, "d"
    )
    pairs = dict(zip(command[4::2], command[5::2]))
    assert pairs["--split_file"] == str(run / "split.json") and pairs["--ckpt_dir"] == str(run / "model")
    assert pairs["--test_split"] == "val" and pairs["--dice_grid"] == "input" and pairs["--dataset_dir"] == "d"
    assert pairs["--image_size"] == "[192,192]" and pairs["--pred_interp"] == "bilinear"
    assert pairs["--mirror_axes"] == "[0, 1]"
    test = evaluation_command(tmp_path / "b", run, tmp_path / "e", {}, None, split="test")
    assert test[test.index("--test_split") + 1] == "test" and "--dataset_dir" not in test
    assert json.loads(pairs["--config_file"]) == [
        str(tmp_path / "b/configs/train.json"),
        str(tmp_path / "b/configs/evaluate.json"),
    ]
    (run / "model" / "model.pt").unlink()
    with pytest.raises(FileNotFoundError, match="model.pt: the run has no kept model"):
        evaluation_command(tmp_path / "b", run, tmp_path / "e", {}, None)
    (run / "command.json").unlink()
    with pytest.raises(FileNotFoundError, match="command.json"):
        evaluation_command(tmp_path / "b", run, tmp_path / "e", {}, None)


def _plan(tmp_path, models):
    out = tmp_path / "plan"
    out.mkdir(exist_ok=True)
    with (out / "models.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, list(models[0]))
        writer.writeheader()
        writer.writerows(models)
    return out


def _evaluation(calls: list, summary=None):
    """A stand-in for the bundle's evaluation (``subprocess.call``): records the command and writes the
    ``dice.json`` that evaluate.json's DiceSummary writes, ``summary(command)`` (by default a fixed one)."""

    def call(command, stdout, stderr, cwd):
        calls.append(command)
        eval_dir = score_val.Path(command[command.index("--output_dir") + 1]) / "eval"
        eval_dir.mkdir(parents=True)
        dice = {"dice": 0.8, "dice_ed": 0.85, "dice_pooled_2d": 0.86, "num_volumes": 24, "dice_per_class": {"lv": 0.9}}
        (eval_dir / "dice.json").write_text(json.dumps(summary(command) if summary else dice))
        return 0

    return call


def test_score_evaluates_each_pair_once_and_collects_the_rows(tmp_path, monkeypatch):
    for name in ("a", "b"):
        _run(tmp_path, name)
    out = _plan(tmp_path, [{"model": m, "set": "primary", "run_dir": f"worktree/{m}"} for m in ("a", "b")])
    calls = []

    def summary(command):
        dice = {"dice": 0.8 + 0.01 * ("--mirror_axes" in command), "dice_ed": 0.85, "dice_pooled_2d": 0.86}
        return {**dice, "num_volumes": 24, "dice_per_class": {"rv": 0.8, "myocardium": 0.75, "lv": 0.9}}

    monkeypatch.setattr(score_val.subprocess, "call", _evaluation(calls, summary))
    argv = [
        "score",
        str(out),
        "--runs-root",
        str(tmp_path),
        "--scoring",
        "plain={}",
        "--scoring",
        'tta={"mirror_axes": [0, 1]}',
    ]
    assert main(argv) == 0 and len(calls) == 4
    assert main(argv) == 0 and len(calls) == 4  # resumed: nothing evaluated twice
    rows = list(csv.DictReader((out / "dice_val.csv").open()))
    assert [(r["model"], r["scoring"], r["dice"]) for r in rows] == [
        ("a", "plain", "0.8"), ("a", "tta", "0.81"), ("b", "plain", "0.8"), ("b", "tta", "0.81")
    ]  # fmt: skip
    assert rows[0]["myocardium"] == "0.75" and rows[0]["num_volumes"] == "24"


def test_score_of_named_models_evaluates_only_those_and_keeps_the_others_rows(tmp_path, monkeypatch):
    _run(tmp_path, "a")  # b is still training: no kept model yet
    out = _plan(tmp_path, [{"model": m, "set": "primary", "run_dir": f"worktree/{m}"} for m in ("a", "b")])
    calls = []

    monkeypatch.setattr(score_val.subprocess, "call", _evaluation(calls))
    argv = ["score", str(out), "--runs-root", str(tmp_path), "--scoring", "plain={}"]
    assert main([*argv, "--model", "a"]) == 0 and len(calls) == 1
    assert "worktree/a" in calls[0][calls[0].index("--ckpt_dir") + 1]
    _run(tmp_path, "b")  # b has finished, in a later session on another machine: a's evaluation is gone
    shutil.rmtree(out / "runs" / "a_plain")
    assert main([*argv, "--model", "b"]) == 0 and len(calls) == 2
    rows = list(csv.DictReader((out / "dice_val.csv").open()))
    assert [(r["model"], r["scoring"], r["dice"]) for r in rows] == [("a", "plain", "0.8"), ("b", "plain", "0.8")]
    assert main(["score", str(out), "--runs-root", str(tmp_path), "--scoring", "other={}", "--model", "b"]) == 0
    rows = list(csv.DictReader((out / "dice_val.csv").open()))  # a scoring not named in this call keeps its rows
    assert [(r["model"], r["scoring"]) for r in rows] == [("a", "plain"), ("b", "other"), ("b", "plain")]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["dice_val.csv", "models.csv"]  # no partial file
    with pytest.raises(ValueError, match=r"models.csv lists no model c"):
        main([*argv, "--model", "c"])
    assert len(calls) == 3


def test_a_failed_evaluation_stops_naming_its_log(tmp_path, monkeypatch):
    _run(tmp_path, "a")
    out = _plan(tmp_path, [{"model": "a", "set": "primary", "run_dir": "worktree/a"}])
    monkeypatch.setattr(score_val.subprocess, "call", lambda *a, **k: 1)
    with pytest.raises(SystemExit, match=r"exit 1\): .*a_plain/eval.log"):
        main(["score", str(out), "--runs-root", str(tmp_path), "--scoring", "plain={}"])
    with pytest.raises(SystemExit):  # argparse: overrides that are not a JSON object
        main(["score", str(out), "--runs-root", str(tmp_path), "--scoring", "plain=[1]"])


def test_paired_reading_by_hand(tmp_path):
    out = _plan(
        tmp_path, [{"model": m, "set": s, "run_dir": m} for m, s in [("x", "p"), ("y", "p"), ("z", "p"), ("w", "q")]]
    )
    with (out / "dice_val.csv").open("w") as f:
        f.write("model,scoring,dice\nx,A,0.80\nx,B,0.81\ny,A,0.70\ny,B,0.72\nz,A,0.60\nz,B,0.64\nw,A,0.5\nw,B,0.1\n")
    r = paired(out, "p", "A", "B")
    # differences 0.01, 0.02, 0.04: mean 0.07 / 3; SD sqrt(((-1/75)^2 + (-1/300)^2 + (1/60)^2) / 2); t = sqrt(7) on
    # 2 df, whose two-sided p is 1 - t / sqrt(t^2 + 2) = 1 - sqrt(7) / 3; half width t_{0.975, 2} * SD / sqrt(3)
    assert r["n"] == 3 and r["higher"] == 3
    assert math.isclose(r["mean"], 0.07 / 3, rel_tol=1e-9)
    assert math.isclose(r["sd"], math.sqrt(4.6666667e-4 / 2), rel_tol=1e-6)
    assert math.isclose(r["p"], 1 - math.sqrt(7) / 3, rel_tol=1e-6)
    assert math.isclose(r["high"] - r["mean"], 4.302652729749462 * r["sd"] / math.sqrt(3), rel_tol=1e-9)
    with pytest.raises(ValueError, match="set 'q': 1 models"):
        paired(out, "q", "A", "B")


def test_two_arms_are_paired_by_fold_by_hand(tmp_path):
    rows = [("a0", "g128", "0"), ("a1", "g128", "1"), ("a2", "g128", "2"), ("b2", "g192", "2"), ("b0", "g192", "0")]
    rows += [("b1", "g192", "1"), ("b3", "g192", "3")]  # fold 3 has no 128 model: left out
    out = _plan(tmp_path, [{"model": m, "set": s, "run_dir": m, "pair": k} for m, s, k in rows])
    with (out / "dice_val.csv").open("w") as f:
        f.write("model,scoring,dice\na0,full,0.80\na1,full,0.70\na2,full,0.60\nb0,full,0.83\nb1,full,0.69\n")
        f.write("b2,full,0.66\nb3,full,0.99\na0,other,0.0\nb0,other,1.0\n")
    r = arms(out, "full", "g128", "g192")
    # differences by fold 0.03, -0.01, 0.06 (in the order of set a): mean 0.08 / 3; deviations 1/300, -11/300,
    # 10/300, so SD = sqrt(222 / 90000 / 2); t = mean / (SD / sqrt(3)) on 2 df, two-sided p = 1 - t / sqrt(t^2 + 2)
    sd = math.sqrt(222 / 90000 / 2)
    t = (0.08 / 3) / (sd / math.sqrt(3))
    assert r["pairs"] == ["0", "1", "2"] and r["n"] == 3 and r["higher"] == 2
    assert math.isclose(r["mean"], 0.08 / 3, rel_tol=1e-9)
    assert math.isclose(r["sd"], sd, rel_tol=1e-9)
    assert math.isclose(r["p"], 1 - t / math.sqrt(t * t + 2), rel_tol=1e-9)
    assert math.isclose(r["high"] - r["mean"], 4.302652729749462 * sd / math.sqrt(3), rel_tol=1e-9)
    with pytest.raises(ValueError, match="1 pairs scored as 'other'"):
        arms(out, "other", "g128", "g192")


def test_arms_need_a_pair_column_named_once_per_arm(tmp_path):
    out = _plan(tmp_path, [{"model": "a", "set": "s", "run_dir": "a"}])
    (out / "dice_val.csv").write_text("model,scoring,dice\n")
    with pytest.raises(ValueError, match="needs a 'pair' column"):
        arms(out, "full", "s", "t")
    out = _plan(tmp_path, [{"model": m, "set": "s", "run_dir": m, "pair": "0"} for m in ("a", "b")])
    with pytest.raises(ValueError, match="pair '0' twice in set 's'"):
        arms(out, "full", "s", "t")


def test_a_gate_reads_the_level_of_a_whole_set_by_hand(tmp_path, capsys):
    names = ["m0", "m1", "m2", "m3", "m4"]
    out = _plan(tmp_path, [{"model": m, "set": "o" if m == "other" else "g", "run_dir": m} for m in names + ["other"]])
    with (out / "dice_test.csv").open("w") as f:
        f.write("model,scoring,dice\nm0,full,0.90\nm1,full,0.88\nm2,full,0.92\nm3,full,0.86\nm4,full,0.94\n")
        f.write("m0,near,0.5\nother,full,0.1\n")
    # the set is m0-m4 ("other" is not of it): mean 0.90; deviations 0, -0.02, 0.02, -0.04, 0.04, so SD =
    # sqrt(0.004 / 4); half width t_{0.975, 4} * SD / sqrt(5) with t_{0.975, 4} = 2.7764451051977987
    half = 2.7764451051977987 * math.sqrt(0.001) / math.sqrt(5)
    r = level(out, "g", "full", split="test", threshold=0.89)
    assert r["models"] == dict(zip(names, [0.90, 0.88, 0.92, 0.86, 0.94])) and r["n"] == 5
    assert math.isclose(r["mean"], 0.90, rel_tol=1e-12) and math.isclose(r["sd"], math.sqrt(0.001), rel_tol=1e-9)
    assert math.isclose(r["low"], 0.90 - half, rel_tol=1e-9) and math.isclose(r["high"], 0.90 + half, rel_tol=1e-9)
    assert r["met"] and r["interval"] == "across"  # 0.8607 .. 0.9393 holds 0.89
    assert level(out, "g", "full", split="test", threshold=0.85)["interval"] == "above"
    below = level(out, "g", "full", split="test", threshold=0.95)
    assert not below["met"] and below["interval"] == "below"
    assert "met" not in level(out, "g", "full", split="test")
    main(["level", str(out), "--set", "g", "--scoring", "full", "--split", "test", "--threshold", "0.95"])
    assert json.loads(capsys.readouterr().out)["interval"] == "below"
    with pytest.raises(ValueError, match=r"dice_test.csv: set 'g' has no 'dice' scored 'near' for m1, m2, m3, m4"):
        level(out, "g", "near", split="test")
    with pytest.raises(ValueError, match="names no model of set 'h'"):
        level(out, "h", "full", split="test")
    with pytest.raises(ValueError, match="set 'o': 1 model"):
        level(out, "o", "full", split="test")


def test_a_gate_over_draws_takes_its_interval_over_the_fold_means_by_hand(tmp_path):
    rows = [("a", "0", 0.50), ("b", "0", 0.70), ("c", "1", 0.62), ("d", "1", 0.66), ("e", "2", 0.71), ("f", "2", 0.75)]
    out = _plan(tmp_path, [{"model": m, "set": "L2", "run_dir": m, "fold": k} for m, k, _ in rows])
    with (out / "dice_test.csv").open("w") as f:
        f.write("model,scoring,dice\n" + "".join(f"{m},bl,{v}\n" for m, _, v in rows))
    r = level(out, "L2", "bl", split="test", threshold=0.68, cluster="fold")
    # fold means 0.60, 0.64, 0.73: mean 0.6566..., the mean over the six models; deviations -1.7/30, -0.5/30,
    # 2.2/30, so SD = sqrt(7.98 / 900 / 2); half width t_{0.975, 2} * SD / sqrt(3), t_{0.975, 2} = 4.302652729749462
    sd = math.sqrt(7.98 / 900 / 2)
    assert r["n"] == 3 and r["cluster_means"] == pytest.approx({"0": 0.60, "1": 0.64, "2": 0.73})
    assert math.isclose(r["mean"], 1.97 / 3, rel_tol=1e-12) and math.isclose(r["sd"], sd, rel_tol=1e-9)
    assert math.isclose(r["high"] - r["mean"], 4.302652729749462 * sd / math.sqrt(3), rel_tol=1e-9)
    assert not r["met"] and r["interval"] == "across"
    with pytest.raises(ValueError, match=r"clusters by 'fold' of unequal size \{'0': 2, '1': 2, '2': 1\}"):
        _plan(tmp_path, [{"model": m, "set": "L2", "run_dir": m, "fold": k} for m, k, _ in rows[:5]])
        level(out, "L2", "bl", split="test", cluster="fold")


def test_lost_models_are_read_from_the_plan_that_scored_them(tmp_path, monkeypatch):
    _run(tmp_path, "new")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "dice_val.csv").write_text(
        "model,scoring,dice,dice_ed,dice_pooled_2d,rv,num_volumes\n"
        "lost,one_pass,0.70,0.71,0.72,0.6,24\nlost,mirrored,0.75,0.76,0.77,0.65,24\nother,mirrored,0.1,0.1,0.1,0.1,2\n"
    )
    models = [
        {
            "model": "lost",
            "set": "old",
            "run_dir": "",
            "pair": "0",
            "scored_in": "../earlier",
            "scored_as": "tta:mirrored",
        },
        {"model": "new", "set": "new", "run_dir": "worktree/new", "pair": "0", "scored_in": "", "scored_as": ""},
    ]
    out = _plan(tmp_path, models)
    calls = []

    summary = {"dice": 0.8, "dice_ed": 0.8, "dice_pooled_2d": 0.8, "num_volumes": 24, "dice_per_class": {"rv": 0.7}}
    monkeypatch.setattr(score_val.subprocess, "call", _evaluation(calls, lambda command: summary))
    main(
        [
            "score",
            str(out),
            "--runs-root",
            str(tmp_path),
            "--scoring",
            'tta={"mirror_axes": [0, 1]}',
            "--scoring",
            "x={}",
        ]
    )
    assert len(calls) == 2 and all("worktree/new" in c[c.index("--ckpt_dir") + 1] for c in calls)  # nothing for 'lost'
    rows = list(csv.DictReader((out / "dice_val.csv").open()))
    assert rows[0] == {
        "model": "lost", "scoring": "tta", "dice": "0.75", "dice_ed": "0.76", "dice_pooled_2d": "0.77", "rv": "0.65",
        "num_volumes": "24", "scored_in": "../earlier:mirrored",
    }  # fmt: skip
    assert [(r["model"], r["scoring"], r["scored_in"]) for r in rows[1:]] == [("new", "tta", ""), ("new", "x", "")]
    models[0]["scored_as"] = "tta:missing"
    out = _plan(tmp_path, models)
    with pytest.raises(ValueError, match=r"earlier/dice_val.csv: no row for model 'lost' scored 'missing'"):
        score_val.collect(out, ["tta"])
    models[0]["scored_as"] = "tta"
    out = _plan(tmp_path, models)
    with pytest.raises(ValueError, match="scored_as must be 'here:there' pairs"):
        score_val.collect(out, ["tta"])


def test_the_rows_take_the_bundles_own_classes(tmp_path):
    out = _plan(tmp_path, [{"model": "p", "set": "primary", "run_dir": "p"}])
    summary = out / "runs" / "p_plain" / "eval" / "dice.json"
    summary.parent.mkdir(parents=True)
    per_class = {"peripheral_zone": 0.61234, "transition_zone": 0.80004}
    summary.write_text(
        json.dumps({"dice": 0.7, "dice_ed": 0.7, "dice_pooled_2d": 0.72, "num_volumes": 8, "dice_per_class": per_class})
    )
    rows = list(csv.DictReader(score_val.collect(out, ["plain"]).open()))
    assert rows == [
        {"model": "p", "scoring": "plain", "dice": "0.7", "dice_ed": "0.7", "dice_pooled_2d": "0.72",
         "peripheral_zone": "0.6123", "transition_zone": "0.8", "num_volumes": "8"}
    ]  # fmt: skip


def test_a_variant_without_volumes_is_an_empty_cell_and_reads_no_pair(tmp_path):
    # prostate has no cardiac phases: the evaluation's dice_ed is null (docs/results/gate-fullsup_prostate)
    out = _plan(tmp_path, [{"model": m, "set": "primary", "run_dir": m} for m in ("p", "q")])
    for model, plain, mirrored in (("p", 0.70, 0.72), ("q", 0.60, 0.65)):
        for scoring, dice in (("plain", plain), ("mirrored", mirrored)):
            summary = out / "runs" / f"{model}_{scoring}" / "eval" / "dice.json"
            summary.parent.mkdir(parents=True)
            summary.write_text(json.dumps({
                "dice": dice, "dice_ed": None, "dice_pooled_2d": dice, "num_volumes": 4,
                "dice_per_class": {"transition_zone": dice},
            }))  # fmt: skip
    rows = list(csv.DictReader(score_val.collect(out, ["plain", "mirrored"]).open()))
    assert [r["dice_ed"] for r in rows] == ["", "", "", ""]
    reading = score_val.paired(out, "primary", "plain", "mirrored")
    assert reading["n"] == 2 and reading["mean"] == pytest.approx(0.035)
    with pytest.raises(ValueError, match="0 models scored both"):
        score_val.paired(out, "primary", "plain", "mirrored", key="dice_ed")


def test_score_of_a_run_folder_evaluates_the_model_that_ran_there(tmp_path, monkeypatch):
    for name in ("a", "b"):
        _run(tmp_path, name)
    listed = [
        {"model": "lost", "set": "old", "run_dir": ""},  # a model read from another plan: no run folder
        {"model": "m_a", "set": "new", "run_dir": "worktree/a"},
        {"model": "m_b", "set": "new", "run_dir": "worktree/b"},
        {"model": "m_b_gpu", "set": "gpu", "run_dir": "train/b"},  # the same folder name on another machine
    ]
    out = _plan(tmp_path, listed)
    calls = []

    monkeypatch.setattr(score_val.subprocess, "call", _evaluation(calls))
    argv = ["score", str(out), "--runs-root", str(tmp_path), "--scoring", "plain={}", "--split", "test"]
    assert main([*argv, "--run", "a"]) == 0 and len(calls) == 1
    assert "worktree/a" in calls[0][calls[0].index("--ckpt_dir") + 1]
    rows = list(csv.DictReader((out / "dice_test.csv").open()))
    assert [(r["model"], r["scoring"]) for r in rows] == [("m_a", "plain")]
    with pytest.raises(ValueError, match=r"models.csv: 2 models have the run folder 'b', not 1"):
        main([*argv, "--run", "b"])
    with pytest.raises(ValueError, match=r"models.csv: 0 models have the run folder 'c', not 1"):
        main([*argv, "--run", "c"])
    assert len(calls) == 1  # a refused folder evaluates nothing


def test_one_plan_scores_a_model_on_both_splits_each_from_its_own_evaluation(tmp_path, monkeypatch):
    # a plan that scores each run on its validation patients and then, sealed, on the test patients (the gates'
    # score_job): the test rows must come from an evaluation of the test patients, not from the validation one
    _run(tmp_path, "a")
    out = _plan(tmp_path, [{"model": "m", "set": "s", "run_dir": "worktree/a"}])
    calls = []

    def summary(command):  # the number of volumes says which patients were scored
        volumes = {"val": 24, "test": 40}[command[command.index("--test_split") + 1]]
        return {"dice": 0.8, "dice_ed": 0.85, "dice_pooled_2d": 0.86, "num_volumes": volumes, "dice_per_class": {}}

    monkeypatch.setattr(score_val.subprocess, "call", _evaluation(calls, summary))
    argv = ["score", str(out), "--runs-root", str(tmp_path), "--scoring", "plain={}", "--run", "a"]
    for split in ("val", "test", "val", "test"):  # the second pass resumes: nothing evaluated again
        assert main([*argv, "--split", split]) == 0
    assert [c[c.index("--test_split") + 1] for c in calls] == ["val", "test"]
    for split, volumes in (("val", "24"), ("test", "40")):
        rows = list(csv.DictReader((out / f"dice_{split}.csv").open()))
        assert [(r["model"], r["num_volumes"]) for r in rows] == [("m", volumes)]
