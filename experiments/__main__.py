"""
Command line of the benchmark harness::

    python -m experiments --preset cpu-mini --data acdc --data-root ../shared/data
    python -m experiments --preset cpu-mini --data prostate --pretrain-data acdc --data-root ../shared/data
    python -m experiments tsne --name cpu-ablation_acdc --methods simclr multi_meta multi_meta_mitigator
    python -m experiments report --name cpu-mini_acdc
    python -m experiments compare --names cpu-semi_acdc cpu-semi-w10_acdc --baseline random
    python -m experiments protocol --name cpu-protocol_acdc
    python -m experiments.gpu_session --out "$OUT"          # on a time-limited GPU session (docs/gpu_run.md)
    python -m experiments keep results/NAME docs/results/protocol_acdc/kept/NAME.tar.xz   # or a folder
    python -m experiments restore docs/results/protocol_acdc/kept/NAME.tar.xz results/NAME
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.bundles import default_bundle_dir
from experiments.experiment import DATASETS, Experiment
from experiments.gpu_session import harness_commands
from experiments.plan import read_plan
from experiments.presets import METHODS, PRESETS, Preset, finetune_iteration_overrides, get_preset
from experiments.report import BASELINES, POWER_DIFFERENCES, VALIDATION_SET, read_results, write_report
from experiments.runner import run_experiment

PROG = "python -m experiments"

#: what other packages add to this command line, each a module with ``COMMANDS`` (sub-command -> main(argv)),
#: ``add_run_options(parser)`` (options of the run) and ``run_checks(args)`` (the runner's cell checks those options
#: choose, :py:data:`experiments.runner.CellCheck`)
EXTENSIONS = (harness_commands,)


def _value(text: str) -> Any:
    """
    A JSON value (number, list, true/false/null) or a Python literal (``True``, ``False``, ``None``, a tuple),
    as ``python -m monai.bundle run --key value`` reads them, else the string itself: ``dice_batch=False`` is the
    boolean, not the string "False" that a bundle would read as true.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _key_values(items: Sequence[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}.")
        out[key] = _value(value)
    return out


def run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run the paper's protocol through the bundles: pre-train each method, fine-tune with L labelled "
        "patients over paired draws, test Dice; write results.csv, table.md and plots under RESULTS_DIR/NAME. "
        "Other commands: "
        + ", ".join(f"'{PROG} {command} --help'" for command in _commands())
        + "; runs in time-limited GPU sessions: 'python -m experiments.gpu_session --help'.",
    )
    parser.add_argument("--preset", default="cpu-mini", choices=list(PRESETS), help="protocol (default cpu-mini)")
    parser.add_argument("--data", required=True, choices=list(DATASETS), help="dataset of fine-tuning and test")
    parser.add_argument(
        "--data-root",
        type=Path,
        default=Path(os.environ.get("GCL_DATA_ROOT", "data")),
        help="folder with the datasets' folders (default $GCL_DATA_ROOT or ./data)",
    )
    parser.add_argument(
        "--pretrain-data", choices=list(DATASETS), help="pre-train on another dataset (out of distribution)"
    )
    parser.add_argument("--test-root", type=Path, help="external test set in the layout of --data (all its patients)")
    parser.add_argument(
        "--input-grid",
        action="store_true",
        help="also evaluate every cell in each volume's own grid (evaluate.json dice_grid=input) on the test and the "
        "validation patients: rows test_input and val_input (e.g. compare --test-set val_input), a Dice that runs "
        "with another field of view or image size share",
    )
    parser.add_argument("--name", help="experiment name (default PRESET_DATA, or PRESET_PRETRAIN-to-DATA)")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--bundle-dir", type=Path, default=None, help="folder of the gcl_<data> bundles")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS))
    parser.add_argument("--num-labeled", nargs="+", type=int, metavar="L")
    parser.add_argument("--repeats", type=int, help="labelled draws per L")
    parser.add_argument("--seeds-per-draw", type=int, help="fine-tuning seeds per draw")
    parser.add_argument(
        "--pretrain-seeds",
        nargs="+",
        type=int,
        metavar="SEED",
        help="pre-training seeds of every pre-trained method (e.g. 0 1 2)",
    )
    parser.add_argument("--pretrain-epochs", type=int)
    parser.add_argument("--finetune-iterations", type=int, help="total fine-tuning iterations per cell")
    parser.add_argument("--image-size", type=int, help="in-plane size of the slices")
    parser.add_argument("--features", nargs=6, type=int, help="BasicUNet's six feature sizes")
    parser.add_argument("--pretrain-set", nargs="+", default=[], metavar="KEY=VALUE", help="pretrain.json overrides")
    parser.add_argument("--finetune-set", nargs="+", default=[], metavar="KEY=VALUE", help="train.json overrides")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: the bundles' choice)")
    parser.add_argument(
        "--pretrain-from",
        nargs="+",
        default=[],
        metavar="NAME",
        help="other experiments (names in RESULTS_DIR, or folders) whose finished pre-trainings are taken where they "
        "are the same run (method, settings, split) instead of pre-training again",
    )
    parser.add_argument(
        "--finetune-from",
        nargs="+",
        default=[],
        metavar="NAME",
        help="other experiments whose trained fine-tuning cells are taken where they are the same run (method, L, "
        "draw, seed, settings, split, the same encoder) instead of fine-tuning again",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="cells running at once, each in a worker process with OMP_NUM_THREADS (else cores / jobs) torch "
        "threads; a fine-tuning cell waits for its pre-training (default 1, or the number of --devices)",
    )
    parser.add_argument(
        "--devices",
        nargs="+",
        default=[],
        metavar="DEVICE",
        help="devices dealt round-robin to the running cells, e.g. cuda:0 cuda:1 (instead of --device)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan (cells and overrides) and exit")
    for extension in EXTENSIONS:
        extension.add_run_options(parser)
    return parser


def preset_from_args(args: argparse.Namespace) -> Preset:
    """The chosen preset with the command line's changes (its name then ends with ``+custom``)."""
    preset = get_preset(args.preset)
    changes: dict[str, Any] = {}
    for attr in ("repeats", "seeds_per_draw", "device"):
        if getattr(args, attr) is not None:
            changes[attr] = getattr(args, attr)
    if args.methods:
        changes["methods"] = tuple(args.methods)
    if args.num_labeled:
        changes["num_labeled"] = tuple(args.num_labeled)
    if args.pretrain_seeds:
        changes["pretrain_seeds"] = tuple(dict.fromkeys(args.pretrain_seeds))
    common: dict[str, Any] = {}
    if args.image_size:
        common["image_size"] = [args.image_size, args.image_size]
    if args.features:
        common["features"] = list(args.features)
    pretrain = _key_values(args.pretrain_set)
    if args.pretrain_epochs is not None:
        pretrain["epochs"] = args.pretrain_epochs
    finetune = _key_values(args.finetune_set)
    if args.finetune_iterations is not None:
        finetune.update(
            finetune_iteration_overrides(args.finetune_iterations, preset.finetune.get("iterations_per_epoch"))
        )
    if common:
        changes["common"] = common
    if pretrain:
        changes["pretrain"] = pretrain
    if finetune:
        changes["finetune"] = finetune
    return preset.replace(name=f"{preset.name}+custom", **changes) if changes else preset


def _experiment_folders(results_dir: Path, option: str, names: Sequence[str]) -> list[Path]:
    """The folders of experiments named on the command line (names in ``results_dir``, or folders)."""
    found = [results_dir / n if (results_dir / n).is_dir() else Path(n) for n in names]
    missing = [str(f) for f in found if not f.is_dir()]
    if missing:
        raise SystemExit(f"{option}: no experiment folder {', '.join(missing)}.")
    return [f.resolve() for f in found]


def main_run(argv: Sequence[str]) -> int:
    args = run_parser().parse_args(argv)
    name = args.name or (
        f"{args.preset}_{args.data}"
        if args.pretrain_data in (None, args.data)
        else f"{args.preset}_{args.pretrain_data}-to-{args.data}"
    )
    experiment = Experiment(
        name=name,
        data=args.data,
        preset=preset_from_args(args),
        # absolute paths: the split files and plan.json then work from any working directory
        data_root=args.data_root.resolve(),
        results_dir=args.results_dir.resolve(),
        bundle_dir=(args.bundle_dir or default_bundle_dir()).resolve(),
        pretrain_data=args.pretrain_data,
        test_root=args.test_root.resolve() if args.test_root else None,
        input_grid=args.input_grid,
    )
    if args.devices and args.device:
        raise SystemExit("--device and --devices: give one of them.")
    jobs = args.jobs if args.jobs is not None else max(1, len(args.devices))
    if jobs < 1:
        raise SystemExit(f"--jobs must be at least 1, got {jobs}.")
    csv_path = run_experiment(
        experiment,
        dry_run=args.dry_run,
        jobs=jobs,
        devices=args.devices,
        pretrain_from=_experiment_folders(args.results_dir, "--pretrain-from", args.pretrain_from),
        finetune_from=_experiment_folders(args.results_dir, "--finetune-from", args.finetune_from),
        checks=[check for extension in EXTENSIONS for check in extension.run_checks(args)],
    )
    if csv_path is None:
        return 0
    failed = [r for r in read_results(csv_path) if r["status"] in ("failed", "pretrain_failed")]
    if failed:  # why, in a few words: the message column holds each row's reason
        reasons = sorted({r["message"][:200] for r in failed})
        more = f" (and {len(reasons) - 3} other reasons)" if len(reasons) > 3 else ""
        shown = "; ".join(reasons[:3]) + more
        logging.getLogger("experiments").error(
            "%d result rows failed (the message column of %s): %s.", len(failed), csv_path, shown
        )
    return 1 if failed else 0


def main_tsne(argv: Sequence[str]) -> int:
    from experiments.tsne import run_tsne

    parser = argparse.ArgumentParser(
        prog=f"{PROG} tsne",
        description="The paper's Fig. 4: t-SNE of the image-wise representations of the pre-training slices of an "
        "experiment, one row per method, one column per meta label -> RESULTS_DIR/NAME/tsne.png.",
    )
    parser.add_argument("--name", required=True)
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--methods", nargs="+", default=["simclr", "multi_meta", "multi_meta_mitigator"])
    parser.add_argument("--max-points", type=int, default=1000, help="slices embedded (seeded subset)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run_tsne(args.results_dir / args.name, args.methods, max_points=args.max_points, seed=args.seed)
    return 0


def main_report(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} report", description="Rewrite table.md and the plots of an experiment from its results.csv."
    )
    parser.add_argument("--name", required=True)
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument(
        "--baselines",
        nargs="+",
        default=list(BASELINES),
        metavar="METHOD",
        help=f"methods every other method is paired with (default: {' '.join(BASELINES)}); e.g. add gcl for the "
        "semi-supervised rows on top of it, or multi_meta for GradMitigator's share",
    )
    parser.add_argument(
        "--power-differences",
        nargs="*",
        type=float,
        default=list(POWER_DIFFERENCES),
        metavar="DICE",
        help="true differences for which the report gives the pairs needed at the measured spread (default: "
        f"{' '.join(map(str, POWER_DIFFERENCES))}; none: no power table)",
    )
    args = parser.parse_args(argv)
    if any(not 0 < d < 1 for d in args.power_differences):
        parser.error(f"--power-differences must be in (0, 1), got {args.power_differences}.")
    folder = args.results_dir / args.name
    try:
        known = read_plan(folder)["methods"]
    except FileNotFoundError as error:
        parser.error(f"{error} No experiment of that name in {args.results_dir}.")
    missing = [b for b in args.baselines if b not in known]
    if missing:
        parser.error(f"--baselines {' '.join(missing)}: not among the methods of {folder} ({', '.join(known)}).")
    print(write_report(folder, args.baselines, args.power_differences).read_text())
    return 0


def main_compare(argv: Sequence[str]) -> int:
    from experiments.compare import comparison_report, load_experiment

    parser = argparse.ArgumentParser(
        prog=f"{PROG} compare",
        description="Pair the fine-tuning cells (method, L, labelled draw, seed) of several experiments with those of "
        "the first (the reference), e.g. one experiment per value of a --finetune-set override: Dice per draw, mean, "
        "paired differences with 95% t-intervals. Choose settings on the validation patients (the default set).",
    )
    parser.add_argument("--names", nargs="+", required=True, metavar="NAME", help="the reference first")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument(
        "--test-set",
        default=VALIDATION_SET,
        help=f"the rows' test_set (default {VALIDATION_SET}: the validation "
        "patients; test for the test split once a choice is made)",
    )
    parser.add_argument("--methods", nargs="+", metavar="METHOD", help="default: every method found")
    parser.add_argument("--num-labeled", nargs="+", type=int, metavar="L", help="default: every L found")
    parser.add_argument("--baseline", metavar="METHOD", help="also pair every row with this method of the reference")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if len(args.names) < 2:
        parser.error("--names needs a reference and at least one experiment to pair with it.")
    try:
        experiments = [load_experiment(args.results_dir / name, args.test_set) for name in args.names]
        text = comparison_report(experiments, args.test_set, args.methods, args.num_labeled, args.baseline)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


def main_protocol(argv: Sequence[str]) -> int:
    import dataclasses

    from experiments.study.protocol import (
        REGISTRATIONS,
        SCOPES,
        Design,
        analyse,
        analysis_stem,
        select_pretrain_seeds,
        write_analysis,
    )
    from experiments.study.restored import restored_cells, write_sensitivity

    parser = argparse.ArgumentParser(
        prog=f"{PROG} protocol",
        description="A pre-registered analysis (docs/protocol.md, docs/protocol_gpu.md) of experiments' results.csv: "
        "the primary endpoint and the secondary comparisons, seed-aware 95%% intervals, Holm within each family.",
    )
    parser.add_argument("--name", required=True)
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument(
        "--test-set",
        default="test",
        help=f"the rows analysed (test; {VALIDATION_SET}: the "
        "validation patients' last validation Dice, stage B of the protocol)",
    )
    parser.add_argument(
        "--scope",
        choices=sorted(SCOPES),
        default="method",
        help="method: seed-aware intervals (the protocol's); encoder: an experiment of one pre-training seed per "
        "method, intervals over the draws of its encoders (-> encoder_analysis.csv)",
    )
    parser.add_argument(
        "--registration",
        choices=sorted(REGISTRATIONS),
        default="protocol",
        help="the registered comparisons: protocol (docs/protocol.md, L = 2 primary), protocol-L1 (L = 1 primary, "
        "when stage B makes it so), protocol-original (as first registered, before amendment 5), gpu-replication "
        "(docs/protocol_gpu.md: without the positive control), gpu-seeds (docs/protocol_gpu_seeds.md: the same "
        "comparisons on seeds 3 to 14) or converged (docs/protocol_converged.md: protocol's comparisons with the "
        "few-label recipe, preset cpu-converged)",
    )
    parser.add_argument(
        "--with",
        dest="others",
        nargs="+",
        default=[],
        metavar="NAME",
        help="experiments of further pre-training seeds on the same draws (gpu-run --pretrain-seed): their rows "
        "join --name's",
    )
    parser.add_argument(
        "--pretrain-seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="analyse these pre-training seeds only (the cells of the others are left out; random initialisation's "
        "are kept); default: every seed of the experiments",
    )
    parser.add_argument(
        "--out-dir", type=Path, help="where the analysis is written (default: beside --name's results.csv)"
    )
    args = parser.parse_args(argv)
    folders = [args.results_dir / name for name in [args.name, *args.others]]
    for folder in folders:
        if not (folder / "results.csv").exists():
            parser.error(f"{folder / 'results.csv'} does not exist: run the experiment first.")
    registration = REGISTRATIONS[args.registration]
    comparisons = [dataclasses.replace(c, test_set=args.test_set) for c in registration.comparisons]
    # the size each comparison must reach: the experiments' pre-training seeds x labelled draws
    presets = [read_plan(folder)["preset"] for folder in folders]
    if len({p["repeats"] for p in presets}) > 1:
        parser.error(f"the experiments have different numbers of labelled draws: {[p['repeats'] for p in presets]}.")
    seeds = [s for p in presets for s in p["pretrain_seeds"]]
    if len(set(seeds)) < len(seeds):
        parser.error(f"a pre-training seed appears in more than one experiment: {seeds}.")
    # each folder's analysed rows (restored_cells names only the pre-trainings they draw on)
    rows_of = {folder: read_results(folder / "results.csv") for folder in folders}
    if args.pretrain_seeds is not None:
        absent = sorted(set(args.pretrain_seeds) - set(seeds))
        if absent or len(set(args.pretrain_seeds)) < len(args.pretrain_seeds):
            parser.error(f"--pretrain-seeds {args.pretrain_seeds}: the experiments' seeds are {seeds}.")
        seeds = args.pretrain_seeds
        rows_of = {folder: select_pretrain_seeds(folder_rows, seeds) for folder, folder_rows in rows_of.items()}
    rows = [row for folder_rows in rows_of.values() for row in folder_rows]
    keys = [(r["method"], r["num_labeled"], r["draw"], r.get("pretrain_seed", ""), r["test_set"]) for r in rows]
    if len(set(keys)) < len(keys):
        parser.error(
            "the experiments hold the same cell twice (method, L, draw, pre-training seed): join only "
            "experiments of different pre-training seeds."
        )
    design = Design(seeds=len(seeds), draws=presets[0]["repeats"])
    try:
        results = analyse(rows, comparisons, design, args.scope)
        restored = restored_cells(rows_of)
    except ValueError as error:
        parser.error(f"{folders[0]}: {error}")
    out_dir = args.out_dir or folders[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    document = registration.document
    _, md = write_analysis(results, out_dir, args.test_set, args.scope, document, notes=restored.lines())
    print(md.read_text())
    if restored.mixed:  # docs/protocol_converged.md, amendment 5
        primary = [c for c in comparisons if c.family == "primary"]
        sensitivity = analyse(restored.without(rows), primary, design, args.scope)
        _, md = write_sensitivity(sensitivity, restored, out_dir, analysis_stem(args.test_set, args.scope), document)
        print(md.read_text())
    return 0


def main_control_resolved(argv: Sequence[str]) -> int:
    from experiments.study.protocol import control_resolved

    parser = argparse.ArgumentParser(
        prog=f"{PROG} control-resolved",
        description="Stage B's rule (docs/protocol.md): exit 0 when the positive control's lift over random "
        "initialisation at L has a complete seed-aware interval above 0 in a validation analysis, else 1.",
    )
    parser.add_argument("analysis", type=Path, help="protocol_analysis_val.csv of stage B at L")
    parser.add_argument("num_labeled", type=int, metavar="L")
    args = parser.parse_args(argv)
    try:
        return 0 if control_resolved(args.analysis, args.num_labeled) else 1
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))


def _commands() -> dict[str, Callable[[Sequence[str]], int]]:
    """The sub-commands: name -> main(argv), the extensions' after this module's own."""
    own = {
        "tsne": main_tsne,
        "report": main_report,
        "compare": main_compare,
        "protocol": main_protocol,
        "control-resolved": main_control_resolved,
    }
    return {**own, **{name: main for extension in EXTENSIONS for name, main in extension.COMMANDS.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s", stream=sys.stdout
    )
    commands = _commands()
    if argv and argv[0] in commands:
        return commands[argv[0]](argv[1:])
    return main_run(argv)


if __name__ == "__main__":
    sys.exit(main())
