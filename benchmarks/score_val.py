"""
Kept fine-tuning models scored on their fold's validation patients (or, once, on the test patients) under named
scorings, and the paired reading of two scorings (issue 53: a change of evaluation, such as ``pred_interp`` or
``mirror_axes``, is measured on models that already exist, without training).

A plan's ``models.csv`` lists the models (``model``, ``set``, ``run_dir``: a run folder of
``benchmarks/finetune_curves.py``, relative to ``--runs-root``). Each run folder holds the training command
(``command.json``), its split (``split.json``) and its kept model (``model/model.pt``). The evaluation is the
bundle's ``evaluate.json`` on top of its ``train.json`` with ``--test_split val --dice_grid input`` (the original
labels; ``--split test`` scores the split's test patients instead, for a reading set down before), the run's own
recipe overrides (the arguments of its training command that are not the driver's: the grid, the width; so that
preprocessing and network are those the model was trained with) and the scoring's overrides. Each (model, scoring)
evaluates into ``<out>/runs/<model>_<scoring>`` (``<model>_<scoring>_test`` on the test patients, so that one plan
can score both splits); one with a ``dice.json`` is not run again, so ``score`` resumes.
``<out>/dice_<split>.csv`` gets one row per (model, scoring): the primary Dice (3D per volume, ED and ES), the
variants (end-diastole only, pooled 2D), per class, and the number of volumes.

A model that no longer exists but was scored under another plan (a lost machine's models, whose rows are
committed) is named in ``models.csv`` with ``scored_in`` (that plan's folder, relative to this one) and
``scored_as`` (``here:there`` pairs, space-separated: this plan's scoring and the name of the same overrides there):
``score`` evaluates nothing for it, and its rows are copied from ``<scored_in>/dice_<split>.csv`` under this plan's
scoring names, with a ``scored_in`` column saying where they come from.

``paired`` reads the paired difference ``B - A`` of two scorings over the models of one set; ``arms`` reads the
paired difference ``B - A`` of two sets of models (a plan's arms) under one scoring, paired by ``models.csv``'s
``pair`` column (the fold). Both give the mean, its SD, the t interval and two-sided p
(``experiments.study.intervals.encoder_difference``: ``scipy.stats.ttest_1samp``), and the count higher. ``level``
reads one set under one scoring against a gate's threshold (the mean over its models, their SD, the t interval over
the models or over the means of a cluster such as the fold, and where it lies: above, below or across the
threshold); it refuses a set with a model not yet scored, so that a gate is never read on part of its models.

Usage (from the repository root, a checkout at the plan's commit)::

    OMP_NUM_THREADS=1 python -m benchmarks.score_val score docs/results/<plan> --runs-root /work \\
        --scoring plain='{"pred_interp": "bilinear"}' \\
        --scoring mirrored='{"pred_interp": "bilinear", "mirror_axes": [0, 1]}'
    OMP_NUM_THREADS=1 python -m benchmarks.score_val score docs/results/<plan> --runs-root .. \\
        --run f0_fewlabel_L2_d0_s0 --scoring plain='{"pred_interp": "bilinear"}'   # a job's own run, as it ends
    python -m benchmarks.score_val paired docs/results/<plan> --set primary --a plain --b mirrored
    python -m benchmarks.score_val arms docs/results/<plan> --scoring plain --a grid128 --b grid192
    python -m benchmarks.score_val level docs/results/<gate> --set grid192 --scoring fullsup --split test \\
        --threshold 0.90
    python -m benchmarks.score_val level docs/results/<gate> --set L2 --scoring bilinear --split test \\
        --threshold 0.68 --cluster fold
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from experiments.study.intervals import encoder_difference

REPO = Path(__file__).resolve().parents[1]
SUMMARY_KEYS = ("dice", "dice_ed", "dice_pooled_2d")
# the arguments benchmarks/finetune_curves.py sets for every run: what is left in a training command is its recipe
DRIVER_KEYS = {
    "config_file", "init", "labeled", "num_labeled", "draw", "seed", "split_file", "work_dir", "output_dir",
    "ckpt_dir", "num_workers", "progress_bar", "epochs", "iterations_per_epoch", "val_interval", "resume",
}  # fmt: skip


def recipe_overrides(command: list[str]) -> list[str]:
    """The ``--key value`` pairs of a training command (``[python, -m, monai.bundle, run, ...]``) that are not the
    driver's: the run's recipe, in order.

    Raises:
        ValueError: a command that is not ``monai.bundle run`` followed by ``--key value`` pairs.
    """
    if "run" not in command:
        raise ValueError(f"not a 'monai.bundle run' command: {command[:4]}")
    args = command[command.index("run") + 1 :]
    if len(args) % 2 or any(not key.startswith("--") for key in args[::2]):
        raise ValueError(f"expected '--key value' pairs after 'run', got {args}")
    return [token for key, value in zip(args[::2], args[1::2]) if key[2:] not in DRIVER_KEYS for token in (key, value)]


def evaluation_command(
    bundle: Path, run: Path, eval_dir: Path, overrides: dict, data_dir: str | None, split: str = "val"
) -> list[str]:
    """The ``monai.bundle run`` command that scores ``run``'s kept model on the ``split`` patients of its split file
    (original labels) with the run's recipe and the scoring's ``overrides`` (values JSON-encoded), into
    ``eval_dir``."""
    command_file = run / "command.json"
    if not command_file.is_file():
        raise FileNotFoundError(f"{command_file}: the run's training command is needed to evaluate it as trained.")
    if not (run / "model" / "model.pt").is_file():
        raise FileNotFoundError(f"{run / 'model' / 'model.pt'}: the run has no kept model.")
    configs = [str(bundle / "configs" / "train.json"), str(bundle / "configs" / "evaluate.json")]
    command = [sys.executable, "-m", "monai.bundle", "run", "--config_file", json.dumps(configs)]
    command += ["--split_file", str(run / "split.json"), "--test_split", split, "--init", "random"]
    command += ["--work_dir", str(eval_dir), "--output_dir", str(eval_dir), "--ckpt_dir", str(run / "model")]
    command += ["--num_workers", "0", "--dice_grid", "input"]
    command += ["--dataset_dir", data_dir] if data_dir else []
    command += recipe_overrides(json.loads(command_file.read_text()))
    for key, value in overrides.items():
        command += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    return command


def evaluation_dir(out: Path, model: str, scoring: str, split: str) -> Path:
    """Where ``model`` is evaluated under ``scoring`` on ``split``: a folder per split, so that the test patients'
    evaluation is never taken for the validation one that a plan has already run (or the reverse)."""
    return out / "runs" / (f"{model}_{scoring}" if split == "val" else f"{model}_{scoring}_{split}")


def read_models(out: Path) -> list[dict[str, str]]:
    with (out / "models.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def collect(out: Path, scorings: list[str], split: str = "val") -> Path:
    """``<out>/dice_<split>.csv``: one row per (model of ``models.csv``, scoring) that has a ``dice.json``, with a
    column per class of the bundle (the classes of ``dice_per_class``); a model with ``scored_in`` gets the rows
    copied from that plan (:func:`_scored_elsewhere`). The file's earlier rows of a listed model are kept where no
    ``dice.json`` replaces them (a model scored in an earlier session, on a machine since replaced, or under a
    scoring not named in this call). The file is replaced whole (written beside, then renamed), so streams that
    collect at once never leave a partial file."""
    target = out / f"dice_{split}.csv"
    earlier: dict[str, list[dict]] = {}
    if target.is_file():
        with target.open(newline="") as f:
            for r in csv.DictReader(f):
                earlier.setdefault(r["model"], []).append(r)
    rows = []
    for row in read_models(out):
        if row.get("scored_in"):
            rows += _scored_elsewhere(out, row, scorings, split)
            continue
        fresh = {}
        for scoring in scorings:
            summary = evaluation_dir(out, row["model"], scoring, split) / "eval" / "dice.json"
            if summary.is_file():
                d = json.loads(summary.read_text())
                fresh[scoring] = {
                    "model": row["model"], "scoring": scoring, **{k: _rounded(d[k]) for k in SUMMARY_KEYS},
                    **{k: round(v, 4) for k, v in d["dice_per_class"].items()}, "num_volumes": d["num_volumes"],
                }  # fmt: skip
        kept = [r for r in earlier.get(row["model"], []) if r["scoring"] not in fresh]
        rows += [fresh[s] for s in scorings if s in fresh] + kept
    fields = list(dict.fromkeys(k for r in rows for k in r)) or ["model", "scoring", *SUMMARY_KEYS, "num_volumes"]
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    with partial.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields, lineterminator="\n", restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(partial, target)
    return target


def _scored_elsewhere(out: Path, row: dict[str, str], scorings: list[str], split: str) -> list[dict]:
    """The rows of ``row``'s model under ``scorings`` (those it maps), copied from the plan named in its
    ``scored_in``, renamed by its ``scored_as`` (``here:there ...``).

    Raises:
        ValueError: a ``scored_as`` that is not ``here:there`` pairs, or a mapped row missing there (naming the file).
    """
    mapping = dict(pair.split(":", 1) for pair in row.get("scored_as", "").split() if ":" in pair)
    if len(mapping) != len(row.get("scored_as", "").split()) or not mapping:
        raise ValueError(f"{out / 'models.csv'}: model {row['model']!r}: scored_as must be 'here:there' pairs")
    source = out / row["scored_in"] / f"dice_{split}.csv"
    with source.open(newline="") as f:
        there = {(r["model"], r["scoring"]): r for r in csv.DictReader(f)}
    rows = []
    for scoring in scorings:
        if scoring not in mapping:
            continue
        if (row["model"], mapping[scoring]) not in there:
            raise ValueError(f"{source}: no row for model {row['model']!r} scored {mapping[scoring]!r}")
        found = there[(row["model"], mapping[scoring])]
        rows.append({**found, "scoring": scoring, "scored_in": f"{row['scored_in']}:{mapping[scoring]}"})
    return rows


def score(
    out: Path,
    runs_root: Path,
    scorings: dict[str, dict],
    bundle: Path,
    data_dir: str | None,
    split: str = "val",
    models: list[str] | None = None,
    runs: list[str] | None = None,
) -> Path:
    """Evaluates every (model, scoring) without a ``dice.json`` yet, then :func:`collect`; with ``models`` (names)
    or ``runs`` (run folders, the last part of a ``run_dir``: what a round's job knows of the run it has just
    trained), only those models of ``models.csv`` (a run scored in the session that trained it, before the machine
    that holds it goes; the rows of the others already scored are kept). A failed evaluation stops the run, naming
    its log.

    Raises:
        ValueError: a name in ``models`` that ``models.csv`` does not list, or a folder in ``runs`` that is not the
            run folder of exactly one of its models (naming the file).
    """
    rows = read_models(out)
    unknown = sorted(set(models or []) - {row["model"] for row in rows})
    if unknown:
        raise ValueError(f"{out / 'models.csv'} lists no model {', '.join(unknown)}")
    for folder in runs or []:
        found = [row["model"] for row in rows if row.get("run_dir") and Path(row["run_dir"]).name == folder]
        if len(found) != 1:
            raise ValueError(f"{out / 'models.csv'}: {len(found)} models have the run folder {folder!r}, not 1")
        models = [*(models or []), *found]
    for row in rows:
        if row.get("scored_in") or (models and row["model"] not in models):
            continue  # no model to evaluate (its rows are copied by collect), or not asked for
        for name, overrides in scorings.items():
            eval_dir = evaluation_dir(out, row["model"], name, split)
            if (eval_dir / "eval" / "dice.json").is_file():
                continue
            eval_dir.mkdir(parents=True, exist_ok=True)
            command = evaluation_command(bundle, runs_root / row["run_dir"], eval_dir, overrides, data_dir, split)
            with (eval_dir / "eval.log").open("w") as log:
                code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
            if code:
                raise SystemExit(f"evaluation failed (exit {code}): {eval_dir / 'eval.log'}")
    return collect(out, list(scorings), split)


def paired(out: Path, set_name: str, a: str, b: str, key: str = "dice", split: str = "val") -> dict:
    """The paired difference ``b - a`` of ``key`` between two scorings over the models of ``set_name``: n, mean,
    SD, the 95% t interval, two-sided p and the count higher.

    Raises:
        ValueError: fewer than 2 models of the set scored both ways.
    """
    models = [r["model"] for r in read_models(out) if r["set"] == set_name]
    values = _values(out, key, split)
    d = [values[(m, b)] - values[(m, a)] for m in models if (m, a) in values and (m, b) in values]
    if len(d) < 2:
        raise ValueError(f"set {set_name!r}: {len(d)} models scored both as {a!r} and {b!r}; need at least 2.")
    return {"set": set_name, "a": a, "b": b, "key": key, **_difference(np.array(d))}


def arms(out: Path, scoring: str, a: str, b: str, key: str = "dice", split: str = "val") -> dict:
    """The paired difference ``b - a`` of ``key`` between two sets of models (two arms of a plan) under one scoring,
    the models paired by ``models.csv``'s ``pair`` column (a fold): n, mean, SD, the 95% t interval, two-sided p
    and the count higher.

    Raises:
        ValueError: ``models.csv`` without a ``pair`` column, a pair named twice in one arm, or fewer than 2 pairs
            scored in both arms.
    """
    rows = read_models(out)
    if rows and "pair" not in rows[0]:
        raise ValueError(f"{out / 'models.csv'}: pairing two arms needs a 'pair' column (the fold)")
    arm: dict[str, dict[str, str]] = {a: {}, b: {}}
    for row in rows:
        if row["set"] in arm:
            if row["pair"] in arm[row["set"]]:
                raise ValueError(f"{out / 'models.csv'}: pair {row['pair']!r} twice in set {row['set']!r}")
            arm[row["set"]][row["pair"]] = row["model"]
    values = _values(out, key, split)
    pairs = [p for p in arm[a] if p in arm[b] and (arm[a][p], scoring) in values and (arm[b][p], scoring) in values]
    if len(pairs) < 2:
        raise ValueError(f"sets {a!r} and {b!r}: {len(pairs)} pairs scored as {scoring!r} in both; need at least 2.")
    d = np.array([values[(arm[b][p], scoring)] - values[(arm[a][p], scoring)] for p in pairs])
    return {"scoring": scoring, "a": a, "b": b, "key": key, "pairs": pairs, **_difference(d)}


def level(
    out: Path,
    set_name: str,
    scoring: str,
    key: str = "dice",
    split: str = "val",
    threshold: float | None = None,
    cluster: str | None = None,
) -> dict:
    """The mean of ``key`` over every model of ``set_name`` under ``scoring``: each model's value, the mean, the SD
    and the 95% t interval (``scipy.stats.t``) over the n models, or, with ``cluster`` (a column of ``models.csv``,
    such as the fold whose draws share validation patients and a pool), over the n means of the models sharing a
    value of it, each cluster the same size so that the mean of the means is the mean over the models (n - 1
    degrees of freedom either way). With ``threshold`` (a gate's), whether the mean reaches it (``met``) and where
    the interval lies (``above``, ``below`` or ``across``).

    Raises:
        ValueError: a set ``models.csv`` does not name, a model of the set without a row of ``scoring`` (naming the
            models and the rows' file: a gate is read on the whole set or not at all), clusters of unequal size,
            or fewer than 2 models (clusters).
    """
    rows = [r for r in read_models(out) if r["set"] == set_name]
    if not rows:
        raise ValueError(f"{out / 'models.csv'} names no model of set {set_name!r}")
    values = _values(out, key, split)
    missing = [r["model"] for r in rows if (r["model"], scoring) not in values]
    if missing:
        raise ValueError(
            f"{out / f'dice_{split}.csv'}: set {set_name!r} has no {key!r} scored {scoring!r} for {', '.join(missing)}"
        )
    models = {r["model"]: values[(r["model"], scoring)] for r in rows}
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[cluster] if cluster else r["model"], []).append(models[r["model"]])
    if len({len(g) for g in groups.values()}) > 1:
        sizes = {k: len(g) for k, g in groups.items()}
        raise ValueError(f"set {set_name!r}: clusters by {cluster!r} of unequal size {sizes}")
    if len(groups) < 2:
        raise ValueError(f"set {set_name!r}: 1 {'cluster' if cluster else 'model'}; an interval needs at least 2.")
    v = np.array([np.mean(g) for g in groups.values()])
    sd = float(v.std(ddof=1))
    low, high = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=sd / np.sqrt(len(v)))
    result = {
        "set": set_name, "scoring": scoring, "key": key, "split": split, "models": models, "cluster": cluster,
        "n": len(v), "mean": float(v.mean()), "sd": sd, "low": float(low), "high": float(high),
    }  # fmt: skip
    if cluster:
        result["cluster_means"] = dict(zip(groups, v.tolist()))
    if threshold is not None:
        where = "above" if low >= threshold else "below" if high < threshold else "across"
        result.update(threshold=threshold, met=bool(v.mean() >= threshold), interval=where)
    return result


def _rounded(value: float | None) -> float | str:
    """A summary value for the rows; ``None`` (a variant with no volume, such as end-diastole only on a dataset
    without cardiac phases) is an empty cell."""
    return "" if value is None else round(value, 4)


def _values(out: Path, key: str, split: str) -> dict[tuple[str, str], float]:
    """``(model, scoring) -> key`` of the plan's rows; an empty cell (a variant the dataset has no volume for) is
    left out, so a reading of it finds no pair."""
    with (out / f"dice_{split}.csv").open(newline="") as f:
        return {(r["model"], r["scoring"]): float(r[key]) for r in csv.DictReader(f) if r[key] != ""}


def _difference(d: np.ndarray) -> dict:
    t = encoder_difference([d])  # the one-sample t interval of the differences (scipy.stats.ttest_1samp)
    return {
        "n": len(d), "mean": t.mean, "sd": float(d.std(ddof=1)), "low": t.low, "high": t.high, "p": t.p,
        "higher": int((d > 0).sum()),
    }  # fmt: skip


def _scoring(text: str) -> tuple[str, dict]:
    name, sep, overrides = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--scoring must be NAME=JSON, got {text!r}")
    try:
        parsed = json.loads(overrides)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--scoring {name}: overrides are not JSON ({e})") from e
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--scoring {name}: overrides must be a JSON object, got {overrides!r}")
    return name, parsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("score", help="evaluate every (model, scoring) not yet scored, then collect")
    run.add_argument("out", type=Path, help="the plan's folder (with models.csv)")
    run.add_argument("--runs-root", type=Path, required=True, help="the folder models.csv's run_dir is relative to")
    run.add_argument("--scoring", type=_scoring, action="append", required=True, help="NAME=JSON overrides")
    run.add_argument("--bundle", type=Path, default=REPO / "bundles" / "gcl_acdc")
    run.add_argument("--data-dir", default=None, help="the dataset folder, where the splits' paths need one")
    run.add_argument("--split", default="val", help="the patients scored: val, or test for a reading set down before")
    run.add_argument("--model", action="append", help="score only this model of models.csv (repeatable)")
    run.add_argument(
        "--run", action="append", help="score only the model whose run_dir ends in this run folder (repeatable)"
    )
    read = commands.add_parser("paired", help="the paired difference of two scorings over a set of models")
    read.add_argument("out", type=Path)
    read.add_argument("--set", required=True)
    read.add_argument("--a", required=True)
    read.add_argument("--b", required=True)
    read.add_argument("--key", default="dice")
    read.add_argument("--split", default="val")
    between = commands.add_parser("arms", help="the paired difference of two sets of models (paired by 'pair')")
    between.add_argument("out", type=Path)
    between.add_argument("--scoring", required=True)
    between.add_argument("--a", required=True, help="the set subtracted")
    between.add_argument("--b", required=True)
    between.add_argument("--key", default="dice")
    between.add_argument("--split", default="val")
    gate = commands.add_parser("level", help="the mean of one set under one scoring, against a gate's threshold")
    gate.add_argument("out", type=Path)
    gate.add_argument("--set", required=True)
    gate.add_argument("--scoring", required=True)
    gate.add_argument("--key", default="dice")
    gate.add_argument("--split", default="val")
    gate.add_argument("--threshold", type=float, default=None, help="the gate's level (the mean must reach it)")
    gate.add_argument("--cluster", default=None, help="the interval over the means of models sharing this column")
    args = parser.parse_args(argv)
    if args.command == "score":
        scorings = dict(args.scoring)
        print(score(args.out, args.runs_root, scorings, args.bundle, args.data_dir, args.split, args.model, args.run))
    elif args.command == "paired":
        print(json.dumps(paired(args.out, args.set, args.a, args.b, args.key, args.split)))
    elif args.command == "arms":
        print(json.dumps(arms(args.out, args.scoring, args.a, args.b, args.key, args.split)))
    else:
        print(json.dumps(level(args.out, args.set, args.scoring, args.key, args.split, args.threshold, args.cluster)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
