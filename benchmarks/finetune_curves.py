"""
Fine-tuning learning curves on cross-validation folds of the training patients (issue 53: the recipe that converges
is chosen on validation, never on the test split).

The non-test patients of a base split (for ACDC the benchmark split, ``docs/results/cpu-mini_acdc/split.json``: 60
patients) are cut into ``--folds`` folds stratified by pathology group (MONAI's ``partition_dataset_classes``). In
fold ``k`` the validation patients are fold ``k``; of the others ``--pool`` patients (seeded) form the labelled pool
(``train``) that the L = 1, 2 draws take from, the rest ``pretrain``; the test patients stay as they are and are never
read (``num_test`` patients kept in the split file so the bundle's split check passes, but no evaluation runs here).

Each run is the bundle's own ``train.json`` (``python -m monai.bundle run``) with the run's overrides, validated every
``--val-every`` iterations (cosine decay over the whole budget) and checkpointed every ``--checkpoint-every`` (the
bundle's epoch, ``iterations_per_epoch``; by default ``--val-every``, one validation an epoch); the validation Dice of
every validation (mean 3D Dice over the fold's volumes, ED and ES) is parsed from the run's log and appended to
``<out>/curves.csv`` (fold, recipe, labelled, draw, seed, iteration, val_dice, finetune_iterations). A run whose rows
are complete is skipped, and an interrupted one continues from its last epoch's checkpoint (the bundle's ``--resume
True``; its log is appended to), so the driver resumes where it stopped; a run folder whose checkpoints came from
another command is refused, naming it.

``collect`` gathers the evaluation of each finished run's kept model on its fold's validation patients (the bundle's
``evaluate.json`` on top of its ``train.json``, with ``--test_split val``: ``runs/<run>/model/eval/dice.json``) into
``<out>/variants_val.csv``: the primary Dice (3D per volume, ED and ES) beside its variants, end-diastole only
(GLCL's) and pooled over the 2D slices (PCL's), so that the evaluation's share of the distance to the published
figures is measured without the test split.

``times`` gathers the wall time of every epoch of every run from the runs' logs (ignite's "Epoch[n] Complete. Time
taken" lines of the trainer and of the evaluator it runs after each epoch) into ``<out>/times.csv``, so that a
round's cost is read from committed rows and outlives the machine that ran it.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python -m benchmarks.finetune_curves --data-root ../shared/data --out curves/acdc \\
        --labeled full --recipe elastic --fold 0 --iterations 6000 --val-every 500 -- --elastic_prob 0.5
    python -m benchmarks.finetune_curves collect curves/acdc
    python -m benchmarks.finetune_curves times curves/acdc
    python -m benchmarks.finetune_curves draws --labeled 1 --draws 2   # each run's labelled patients, no Dice read
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[1]
FIELDS = ["fold", "recipe", "labeled", "draw", "seed", "iteration", "val_dice", "finetune_iterations"]
VARIANT_FIELDS = ["run", "dice", "dice_ed", "dice_pooled_2d", "num_volumes", "num_volumes_ed"]
VAL_DICE = re.compile(r"Epoch\[(\d+)\] Metrics -- val_mean_dice: ([0-9.]+)")
TIME_FIELDS = ["run", "epoch", "iterations", "seconds", "validation_seconds", "seconds_per_iteration"]
EPOCH_TIME = re.compile(
    r"ignite\.engine\.engine\.(\w+) - INFO - Epoch\[(\d+)\] Complete\. Time taken: (\d+):(\d+):([0-9.]+)"
)


def fold_split(base: dict, folds: int, fold: int, pool: int, seed: int = 0) -> dict:
    """The split of fold ``fold``: validation = that fold of the non-test patients (stratified by ``group``),
    ``pool`` seeded patients of the rest as the labelled pool, the others as ``pretrain``; test unchanged."""
    entries = [d for key in ("pretrain", "train", "val") for d in base[key]]
    group = {d["patient"]: d.get("group", "all") for d in entries}
    order = []
    for name in sorted(set(group.values())):
        members = sorted(p for p in group if group[p] == name)
        random.Random(f"{seed}-{name}").shuffle(members)
        order += members
    val = set(order[fold::folds])
    patients = order
    rest = sorted(set(patients) - val)
    labelled_pool = set(random.Random(seed + fold).sample(rest, pool))
    return {
        "pretrain": [d for d in entries if d["patient"] not in val | labelled_pool],
        "train": [d for d in entries if d["patient"] in labelled_pool],
        "val": [d for d in entries if d["patient"] in val],
        "test": base["test"],
    }


def labelled_draws(
    base: dict, folds: int, pool: int, labeled: int, draws: int, seed: int = 0, split_seed: int = 0
) -> dict[tuple[int, int], list[str]]:
    """The labelled patients of every run of a round at L = ``labeled``, as its runs draw them: (fold, draw) -> the
    patients, for the folds ``0 .. folds - 1`` and draws ``0 .. draws - 1``. Each fold's pool is :func:`fold_split`'s
    (``seed``, the driver's ``--seed``), and the bundle draws from it with ``labeled_subset`` and its ``split_seed``
    (0 unless the run's overrides set it) over the bundle's default ``labeled_pool``, the fold's pool. Reads no Dice:
    it can be run before a round's reading."""
    from gcl_monai.data import labeled_subset

    drawn = {}
    for fold in range(folds):
        train = fold_split(base, folds, fold, pool, seed)["train"]
        for draw in range(draws):
            subset = labeled_subset(train, labeled, draw, split_seed)
            drawn[fold, draw] = sorted({d["patient"] for d in subset})
    return drawn


def validation_curve(log: str) -> list[tuple[int, str]]:
    """(epoch, validation Dice) of every validation in a run's log, in epoch order; an epoch validated twice (a run
    stopped after its validation, before its checkpoint, and resumed) counts once, with its later value."""
    return sorted({int(epoch): dice for epoch, dice in VAL_DICE.findall(log)}.items())


def epoch_times(log: str) -> dict[int, tuple[float, float]]:
    """``epoch -> (seconds, validation seconds)`` of every completed trainer epoch in a run's log. ignite times an
    epoch with its completion handlers, so a trainer epoch's seconds include the validation that ran after it (the
    evaluator's own "Complete" line, logged just before); an epoch completed twice (a resumed run) counts once, with
    its later times."""
    times: dict[int, tuple[float, float]] = {}
    validation = 0.0
    for engine, epoch, hours, minutes, seconds in EPOCH_TIME.findall(log):
        taken = 3600 * int(hours) + 60 * int(minutes) + float(seconds)
        if "Evaluator" in engine:
            validation = taken
        else:
            times[int(epoch)] = (taken, validation)
            validation = 0.0
    return dict(sorted(times.items()))


def times(out: Path) -> Path:
    """``<out>/times.csv`` from every run's ``log.txt``: one row per completed epoch, with its iterations (the run's
    ``--iterations_per_epoch``) and the training seconds per iteration (the epoch without its validation). The rows
    of a run whose log is not here (a run of a machine since replaced, its rows committed) are kept as they are."""
    target = out / "times.csv"
    logs = sorted(out.glob("runs/*/log.txt"))
    logged = {log.parent.name for log in logs}
    rows = []
    if target.is_file():
        with target.open() as f:
            rows = [r for r in csv.DictReader(f) if r["run"] not in logged]
    for log in logs:
        command = json.loads((log.parent / "command.json").read_text())
        iterations = int(command[command.index("--iterations_per_epoch") + 1])
        for epoch, (seconds, validation) in epoch_times(log.read_text()).items():
            rows.append({
                "run": log.parent.name, "epoch": epoch, "iterations": iterations, "seconds": round(seconds, 1),
                "validation_seconds": round(validation, 1),
                "seconds_per_iteration": round((seconds - validation) / iterations, 3),
            })  # fmt: skip
    rows.sort(key=lambda r: (r["run"], int(r["epoch"])))
    with target.open("w", newline="") as f:
        writer = csv.DictWriter(f, TIME_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return target


def run_name(fold: int | str, recipe: str, labeled: int | str, draw: int | str, seed: int | str) -> str:
    """The folder under ``<out>/runs`` of a run: ``f<fold>_<recipe>_L<labeled>_d<draw>_s<seed>`` (the key of its
    ``curves.csv`` rows)."""
    return f"f{fold}_{recipe}_L{labeled}_d{draw}_s{seed}"


def check_same_command(run: Path, command: list[str]) -> None:
    """Refuses to resume ``run`` with ``command`` when its checkpoints were written by another command
    (``run/command.json``): the overrides, budget or checkout differ, so continuing would mix two runs."""
    previous = run / "command.json"
    if list((run / "model").glob("checkpoint*.pt")) and (
        not previous.is_file() or json.loads(previous.read_text()) != command
    ):
        raise SystemExit(f"{run} holds checkpoints of another command ({previous}); remove the folder to rerun it.")


def _done(out: Path, key: dict, validations: int) -> bool:
    rows = out / "curves.csv"
    if not rows.is_file():
        return False
    with rows.open() as f:
        got = [r for r in csv.DictReader(f) if all(str(r[k]) == str(v) for k, v in key.items())]
    return len(got) >= validations


def collect(out: Path) -> Path:
    """``<out>/variants_val.csv`` from every ``runs/<run>/model/eval/dice.json``, one row per run."""
    rows = []
    for summary in sorted(out.glob("runs/*/model/eval/dice.json")):
        dice = json.loads(summary.read_text())
        rows.append({"run": summary.parents[2].name, **{k: dice.get(k) for k in VARIANT_FIELDS[1:]}})
    target = out / "variants_val.csv"
    with target.open("w", newline="") as f:
        writer = csv.DictWriter(f, VARIANT_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return target


def read_curves(outs: list[Path]) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """The validation curves of every run in the ``curves.csv`` of each of ``outs``: ``(round, labelled, run) ->
    [(iteration, val_dice), ...]`` in iteration order, the round named by its folder and ``labelled`` the run's
    labelled patients (``full`` or L)."""
    curves: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for out in outs:
        with (out / "curves.csv").open() as f:
            for r in csv.DictReader(f):
                run = f"f{r['fold']} {r['recipe']} L={r['labeled']} d{r['draw']} s{r['seed']}"
                run += f" ({r['finetune_iterations']} it.)"
                key = (out.name, r["labeled"], run)
                curves.setdefault(key, []).append((int(r["iteration"]), float(r["val_dice"])))
    return {key: sorted(points) for key, points in curves.items()}


def mean_curves(out: Path) -> dict[str, dict]:
    """
    Per labelled count of the runs in ``<out>/curves.csv`` (``full`` or L): the mean validation Dice over its runs at
    each validation (``{iteration: (mean, runs)}``) and where each run's best validation falls (``{iteration: runs}``,
    the first of equal values): whether a set's curves level off within the budget.
    """
    dice: dict[str, dict[int, list[float]]] = {}
    best_at: dict[str, Counter] = {}
    for (_, labeled, _), points in read_curves([out]).items():
        for iteration, value in points:
            dice.setdefault(labeled, {}).setdefault(iteration, []).append(value)
        best_at.setdefault(labeled, Counter())[max(points, key=lambda p: p[1])[0]] += 1
    return {
        labeled: {
            "mean": {i: (fmean(d), len(d)) for i, d in sorted(by_iteration.items())},
            "best_at": dict(sorted(best_at[labeled].items())),
        }
        for labeled, by_iteration in dice.items()
    }


#: issue 53's gates on the test patients, by dataset and the runs' labelled patients: full supervision, random
#: initialisation at L = 1 and 2 (the paper's Table 1 random row; prostate's full supervision at Table 3's 0.703)
GATES = {
    "acdc": {"full": 0.90, "1": 0.60, "2": 0.68},
    "prostate": {"full": 0.70, "1": 0.477, "2": 0.547},
}


def dataset_of(outs: list[Path]) -> str:
    """The dataset of the rounds in ``outs``, from their folder names (``<round>_<dataset>``, as in docs/results)."""
    found = {out.resolve().name.rsplit("_", 1)[-1] for out in outs}
    if len(found) != 1 or not found <= GATES.keys():
        raise ValueError(
            f"cannot tell one dataset of {sorted(GATES)} from the folder names {[out.name for out in outs]}: "
            "name the rounds <round>_<dataset> or pass the dataset."
        )
    return found.pop()


def curves_figure(outs: list[Path], dataset: str | None = None) -> Figure:
    """
    Validation Dice against iterations of every run in ``outs`` (rounds of this driver on one ``dataset``, by default
    the one their folder names end with), one panel for full supervision and one for each L with runs, each with the
    dataset's gate where issue 53 sets one (:data:`GATES`), so that a plateau below a gate is seen as such.
    """
    from matplotlib.figure import Figure

    gates = GATES[dataset or dataset_of(outs)]
    curves = read_curves(outs)
    shown = sorted({labeled for _, labeled, _ in curves}, key=lambda k: (k != "full", int(k) if k.isdigit() else 0))
    fig = Figure(figsize=(6 * len(shown), 4.5), layout="constrained")
    panels = {name: fig.add_subplot(1, len(shown), i + 1) for i, name in enumerate(shown)}
    for (round_name, labeled, run), points in curves.items():
        ax = panels[labeled]
        ax.plot(*zip(*points), marker="o", markersize=3, label=f"{round_name}: {run}")
    for name, ax in panels.items():
        title = "full supervision" if name == "full" else f"L = {name}, random init."
        if name in gates:
            ax.axhline(gates[name], color="k", linestyle="--", linewidth=1, label=f"gate {gates[name]:g}")
        ax.set(title=f"{title}: validation Dice in training", xlabel="iteration", ylabel="mean Dice")
        ax.legend(fontsize="xx-small")
    return fig


def plot(outs: list[Path], target: Path, dataset: str | None = None) -> Path:
    """:func:`curves_figure` of ``outs`` saved as ``target``."""
    from gcl_monai.utils import save_figure

    return save_figure(curves_figure(outs, dataset), target, dpi=100)


def _add_split_options(parser: argparse.ArgumentParser) -> None:
    """The options that make a round's folds and pools (:func:`fold_split`): a run's and ``draws``'."""
    parser.add_argument("--base-split", default=str(REPO / "docs/results/cpu-mini_acdc/split.json"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--pool", type=int, default=8, help="patients of the labelled pool per fold")
    parser.add_argument("--seed", type=int, default=0, help="the folds' and the run's seed")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["means"]:
        parser = argparse.ArgumentParser(prog="finetune_curves means")
        parser.add_argument("out", type=Path, help="a round's output folder (with curves.csv)")
        for labeled, entry in mean_curves(parser.parse_args(argv[1:]).out).items():
            means = ", ".join(f"{i}: {m:.3f} ({n})" for i, (m, n) in entry["mean"].items())
            best = ", ".join(f"{i}: {n}" for i, n in entry["best_at"].items())
            print(f"L = {labeled}: mean validation Dice (runs) at {means}; best validation at {best}")
        return 0
    if argv[:1] == ["draws"]:
        parser = argparse.ArgumentParser(prog="finetune_curves draws")
        _add_split_options(parser)
        parser.add_argument("--labeled", type=int, required=True, help="L")
        parser.add_argument("--draws", type=int, required=True, help="draws per fold (0 .. N - 1)")
        args = parser.parse_args(argv[1:])
        base = json.loads(Path(args.base_split).read_text())
        drawn = labelled_draws(base, args.folds, args.pool, args.labeled, args.draws, args.seed)
        for (fold, draw), patients in drawn.items():
            print(f"fold {fold} draw {draw}: {', '.join(patients)}")
        runs = Counter(tuple(p) for p in drawn.values())
        print(f"{len(runs)} distinct labelled sets in {len(drawn)} runs", end="")
        repeated = [f"{', '.join(p)} ({n} runs)" for p, n in runs.items() if n > 1]
        print(f"; drawn more than once: {'; '.join(repeated)}" if repeated else "")
        return 0
    if argv[:1] in (["collect"], ["times"], ["plot"]):
        parser = argparse.ArgumentParser(prog=f"finetune_curves {argv[0]}")
        if argv[0] in ("collect", "times"):
            parser.add_argument("out", type=Path, help="a round's output folder")
            print((collect if argv[0] == "collect" else times)(parser.parse_args(argv[1:]).out))
        else:
            parser.add_argument("outs", type=Path, nargs="+", help="rounds' output folders (each with curves.csv)")
            parser.add_argument("--to", type=Path, required=True, help="the figure (.png)")
            parser.add_argument(
                "--dataset", choices=sorted(GATES), help="whose gates to draw (default: from the folders' names)"
            )
            args = parser.parse_args(argv[1:])
            print(plot(args.outs, args.to, args.dataset))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", required=True, help="folder holding acdc/ (GCL_DATA_ROOT)")
    parser.add_argument("--bundle", default="gcl_acdc")
    _add_split_options(parser)
    parser.add_argument("--fold", type=int, required=True)
    parser.add_argument("--labeled", default="full", help="'full' (every non-validation patient) or L")
    parser.add_argument("--draw", type=int, default=0)
    parser.add_argument("--recipe", required=True, help="name of the overrides, for the rows")
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--val-every", type=int, default=250)
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        help="iterations per epoch, each ending in a checkpoint (a divisor of --val-every; default --val-every)",
    )
    parser.add_argument("--out", required=True)
    args, overrides = parser.parse_known_args(argv)
    overrides = [o for o in overrides if o != "--"]
    if args.iterations % args.val_every:
        raise SystemExit(f"--iterations {args.iterations} is not a multiple of --val-every {args.val_every}.")
    epoch_length = args.checkpoint_every or args.val_every
    if epoch_length <= 0 or args.val_every % epoch_length:
        raise SystemExit(f"--checkpoint-every {epoch_length} does not divide --val-every {args.val_every}.")
    out = Path(args.out)
    key = {"fold": args.fold, "recipe": args.recipe, "labeled": args.labeled, "draw": args.draw, "seed": args.seed}
    validations = args.iterations // args.val_every
    if _done(out, key, validations):
        print(f"done already: {key}")
        return 0
    run = out / "runs" / run_name(**key)
    run.mkdir(parents=True, exist_ok=True)
    base = json.loads(Path(args.base_split).read_text().replace("$GCL_DATA_ROOT", os.path.abspath(args.data_root)))
    (run / "split.json").write_text(json.dumps(fold_split(base, args.folds, args.fold, args.pool, args.seed), indent=1))
    labeled = (
        ["--labeled", "$@split['pretrain'] + @split['train']"]
        if args.labeled == "full"
        else ["--num_labeled", str(int(args.labeled)), "--draw", str(args.draw)]
    )
    command = [
        sys.executable, "-m", "monai.bundle", "run",
        "--config_file", str(REPO / "bundles" / args.bundle / "configs" / "train.json"),
        "--init", "random", *labeled, "--seed", str(args.seed),
        "--split_file", str(run / "split.json"), "--work_dir", str(run), "--output_dir", str(run / "model"),
        "--ckpt_dir", str(run / "released"), "--num_workers", "0", "--progress_bar", "False",
        "--epochs", str(args.iterations // epoch_length), "--iterations_per_epoch", str(epoch_length),
        "--val_interval", str(args.val_every // epoch_length),
        "--resume", "True", *overrides,
    ]  # fmt: skip
    check_same_command(run, command)
    (run / "command.json").write_text(json.dumps(command, indent=1))
    with (run / "log.txt").open("a") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    found = validation_curve((run / "log.txt").read_text())
    if code or len(found) != validations:
        raise SystemExit(f"run failed (exit {code}, {len(found)} of {validations} validations): {run / 'log.txt'}")
    rows = out / "curves.csv"
    new = not rows.is_file()
    with rows.open("a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        for epoch, dice in found:
            it = epoch * epoch_length
            writer.writerow({**key, "iteration": it, "val_dice": dice, "finetune_iterations": args.iterations})
    print(f"{key}: last {found[-1][1]}, best {max(float(d) for _, d in found):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
