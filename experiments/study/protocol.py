"""
The pre-registered analysis of docs/protocol.md: the primary endpoint and the secondary comparisons of an
experiment's ``results.csv``, each a seed-aware interval (:py:mod:`experiments.study.intervals`), each family
Holm-corrected; "resolved" only for what survives the correction.

A registration names the document that registers an analysis and its comparisons: ``protocol`` (docs/protocol.md,
L = 2 primary), ``protocol-L1`` (the same at L = 1, when stage B makes L = 1 primary), ``protocol-original`` (as
first registered, before amendment 5: the analyses made before it), ``gpu-replication`` (docs/protocol_gpu.md: new
pre-training seeds of the GPU sessions' comparison, without the positive control), ``gpu-seeds``
(docs/protocol_gpu_seeds.md: the same comparisons on seeds 3 to 14) or ``converged`` (docs/protocol_converged.md:
``protocol``'s comparisons over the few-label recipe, the preset ``cpu-converged``).

The ``encoder`` scope analyses an experiment with one pre-training seed per method (an exploratory run, such as a
GPU session's) in the same families: paired t-intervals over the draws of those encoders
(:py:func:`~experiments.study.intervals.encoder_difference`). What it resolves is said of those encoders, not of
the methods.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.report import finished_row, markdown_table
from experiments.study.intervals import SeedAwareDifference, encoder_difference, holm, seed_aware_difference

__all__ = [
    "GOALS",
    "ORIGINAL_PROTOCOL_COMPARISONS",
    "PROTOCOL_COMPARISONS",
    "PROTOCOL_DESIGN",
    "REGISTRATIONS",
    "REPLICATION_COMPARISONS",
    "SCOPES",
    "Comparison",
    "Design",
    "Registration",
    "analyse",
    "analysis_stem",
    "control_resolved",
    "difference_table",
    "goal_reading",
    "protocol_comparisons",
    "select_pretrain_seeds",
    "write_analysis",
    "write_csv",
]


@dataclass(frozen=True)
class Comparison:
    """``method - baseline`` at ``num_labeled`` on ``test_set``, in the ``primary`` or ``secondary`` family; ``goal``:
    the project's goal for the difference, where one is registered (read by :func:`goal_reading`)."""

    method: str
    baseline: str
    num_labeled: int
    family: str = "secondary"
    test_set: str = "test"
    goal: float | None = None


#: the project's goals for the primary endpoint (issue 32; docs/protocol.md, docs/protocol_gpu.md)
GOALS = {("gcl", "random"): 0.05, ("gcl", "simclr"): 0.02}


def goal_reading(goal: float | None, difference: SeedAwareDifference | None) -> str:
    """
    A goal read against an interval (docs/protocol_gpu.md, docs/protocol.md amendment 6): ``met`` when the lower
    bound is at or above the goal, ``excluded`` when the upper bound is below it, ``open`` otherwise; "" without a
    goal or an interval.
    """
    if goal is None or difference is None or not math.isfinite(difference.low):
        return ""
    if difference.low >= goal:
        return "met"
    return "excluded" if difference.high < goal else "open"


def protocol_comparisons(primary_l: int = 2) -> tuple[Comparison, ...]:
    """
    docs/protocol.md as amended (amendment 5): the primary endpoint at the primary L (2, or 1 when stage B makes it
    primary), GCL − random and GCL − SimCLR; secondary, the positive control − random and SimCLR − random at the same
    L (one Holm family each). The L that is not primary is not run.
    """
    return (
        Comparison("gcl", "random", primary_l, "primary", goal=GOALS["gcl", "random"]),
        Comparison("gcl", "simclr", primary_l, "primary", goal=GOALS["gcl", "simclr"]),
        Comparison("supervised_encoder", "random", primary_l),
        Comparison("simclr", "random", primary_l),
    )


#: docs/protocol.md: the primary endpoint at L = 2 (amendment 5)
PROTOCOL_COMPARISONS = protocol_comparisons(2)

#: docs/protocol.md as first registered, before amendment 5 (the analyses made before it: gpu-default_acdc's)
ORIGINAL_PROTOCOL_COMPARISONS = (
    *PROTOCOL_COMPARISONS[:2],
    Comparison("supervised_encoder", "random", 2),
    Comparison("simclr", "random", 2),
    Comparison("gcl", "random", 1),
    Comparison("gcl", "simclr", 1),
    Comparison("supervised_encoder", "random", 1),
    Comparison("simclr", "random", 1),
)

#: docs/protocol_gpu.md: the comparisons as first registered without the positive control (the GPU sessions' runs have
#: none): GCL − random and GCL − SimCLR at L = 2 primary, SimCLR − random at L = 2 and the three at L = 1 secondary
REPLICATION_COMPARISONS = tuple(
    c for c in ORIGINAL_PROTOCOL_COMPARISONS if "supervised_encoder" not in (c.method, c.baseline)
)


@dataclass(frozen=True)
class Registration:
    """A registered analysis: the ``document`` that registers it and its ``comparisons`` (a Holm family each)."""

    document: str
    comparisons: tuple[Comparison, ...]


REGISTRATIONS = {
    "protocol": Registration("docs/protocol.md", PROTOCOL_COMPARISONS),
    "protocol-L1": Registration("docs/protocol.md, L = 1 primary", protocol_comparisons(1)),
    "protocol-original": Registration("docs/protocol.md as first registered", ORIGINAL_PROTOCOL_COMPARISONS),
    "gpu-replication": Registration("docs/protocol_gpu.md", REPLICATION_COMPARISONS),
    "gpu-seeds": Registration("docs/protocol_gpu_seeds.md", REPLICATION_COMPARISONS),
    "converged": Registration("docs/protocol_converged.md", PROTOCOL_COMPARISONS),
}


@dataclass(frozen=True)
class Design:
    """The registered size of every comparison: pre-training seeds x labelled draws."""

    seeds: int
    draws: int

    def describe(self, difference: SeedAwareDifference | None) -> str:
        """What a comparison's table lacks of this size ("" when it is complete)."""
        if difference is None:
            return "no pairs"
        if (difference.seeds, difference.draws) == (self.seeds, self.draws):
            return ""
        return f"incomplete: S = {difference.seeds} of {self.seeds}, D = {difference.draws} of {self.draws}"


#: docs/protocol.md: 3 pre-training seeds x 8 labelled draws
PROTOCOL_DESIGN = Design(seeds=3, draws=8)


#: what an analysis's intervals describe: the method over its pre-training seeds, or the encoders of one seed each
SCOPES = {"method": seed_aware_difference, "encoder": encoder_difference}


def _values(rows: Sequence[Mapping[str, Any]], c: Comparison, method: str) -> dict[tuple[int | None, int], float]:
    """``(pretrain seed or None, draw) -> Dice`` of the finished rows (one fine-tuning seed per draw)."""
    out = {}
    for r in rows:
        if r["method"] == method and int(r["num_labeled"]) == c.num_labeled and r["test_set"] == c.test_set:
            if finished_row(r):
                seed = r.get("pretrain_seed", "")
                out[(None if seed in ("", None) else int(seed), int(r["draw"]))] = float(r["dice"])
    return out


def select_pretrain_seeds(rows: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> list[Mapping[str, Any]]:
    """The rows of the pre-training ``seeds`` and those of methods without one (random initialisation: every seed's
    cell pairs with it); the rows of other pre-training seeds are left out."""
    keep = {int(s) for s in seeds}
    return [r for r in rows if r.get("pretrain_seed", "") in ("", None) or int(r["pretrain_seed"]) in keep]


def difference_table(rows: Sequence[Mapping[str, Any]], c: Comparison) -> np.ndarray:
    """
    The S x D table of paired differences of ``c``: the method from pre-training seed s on draw d minus the baseline
    on draw d (the baseline's own seed s when it has pre-training seeds too), over the seeds and draws where both
    finished. Empty (0 x 0) when nothing pairs.
    """
    ours, theirs = _values(rows, c, c.method), _values(rows, c, c.baseline)
    seeds = sorted({s for s, _ in ours}, key=lambda s: -1 if s is None else s)
    draws = sorted({d for _, d in ours})

    def baseline(seed, draw):
        return theirs.get((seed, draw), theirs.get((None, draw), math.nan))

    table = np.array([[ours.get((s, d), math.nan) - baseline(s, d) for d in draws] for s in seeds], dtype=float)
    if table.size == 0:
        return np.zeros((0, 0))
    return table[:, np.isfinite(table).all(0)]  # draws complete for every seed


def analyse(
    rows: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Comparison] = PROTOCOL_COMPARISONS,
    design: Design = PROTOCOL_DESIGN,
    scope: str = "method",
) -> list[dict]:
    """
    One dict per comparison: the difference (``scope`` ``method``: seed-aware; ``encoder``: over the draws of one
    seed's encoders, for a ``design`` of one seed), ``missing`` (what its table lacks of ``design``; "" when
    complete), the Holm-adjusted p within its family, ``resolved`` and its ``direction`` (``above`` or ``below``
    0), and, for a complete comparison with a registered goal, ``goal_reading`` (:func:`goal_reading`).

    Holm's correction runs over every comparison registered in the family, an incomplete one counted with p = 1: it
    cannot be rejected, and the family keeps its registered size (a family analysed before all its runs are done
    is never corrected over fewer comparisons than registered). Only a complete comparison can be resolved.

    Raises:
        ValueError: an unknown ``scope``, or the ``encoder`` scope for a design of several seeds.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {sorted(SCOPES)}, got {scope!r}.")
    if scope == "encoder" and design.seeds != 1:
        raise ValueError(f"the encoder scope analyses one pre-training seed per method; the design has {design.seeds}.")
    difference = SCOPES[scope]
    results = []
    for c in comparisons:
        table = difference_table(rows, c)
        diff = difference(table) if table.shape[1] >= 2 else None
        results.append({"comparison": c, "difference": diff, "missing": design.describe(diff)})
    for family in dict.fromkeys(c.family for c in comparisons):
        members = [r for r in results if r["comparison"].family == family]
        p_values = [
            r["difference"].p if not r["missing"] and math.isfinite(r["difference"].p) else 1.0 for r in members
        ]
        reject, adjusted = holm(p_values)
        for r, rej, adj in zip(members, reject, adjusted):
            r.update(p_holm=adj, resolved=rej and not r["missing"])
    for r in results:
        d = r["difference"]
        r["direction"] = ("above" if d.mean > 0 else "below") if r["resolved"] else ""
        r["goal_reading"] = "" if r["missing"] else goal_reading(r["comparison"].goal, d)
    return results


def _row(result: Mapping[str, Any]) -> dict[str, Any]:
    c: Comparison = result["comparison"]
    d: SeedAwareDifference | None = result["difference"]
    base = {k: ("" if v is None else v) for k, v in asdict(c).items()}
    verdict = {k: result[k] for k in ("p_holm", "resolved", "direction", "missing", "goal_reading")}
    if d is None:
        return {**base, "mean": "", "low": "", "high": "", "p": "", **verdict}
    return {**base, **asdict(d), **verdict}


_TITLES = {
    "method": (
        "protocol_analysis",
        "Pre-registered analysis ({document})",
        "Seed-aware 95 % intervals (two-way ANOVA over pre-training seeds x labelled draws, Satterthwaite df)",
    ),
    "encoder": (
        "encoder_analysis",
        "Exploratory analysis of one pre-training seed per method, in the families of {document}",
        "Paired 95 % t-intervals over the labelled draws of these encoders (the pre-training seed's variance is not "
        "in them: they describe these encoders, not the methods)",
    ),
}


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """``rows`` to the CSV file ``path``, its columns every key of the rows in their first order (a row without one
    leaves it empty); returns ``path``."""
    with Path(path).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), restval="")
        writer.writeheader()
        writer.writerows(rows)
    return Path(path)


def analysis_stem(test_set: str = "test", scope: str = "method") -> str:
    """The name of an analysis's files: ``protocol_analysis[_<test_set>]`` (``scope`` ``encoder``:
    ``encoder_analysis[_<test_set>]``)."""
    name = _TITLES[scope][0]
    return name if test_set == "test" else f"{name}_{test_set}"


def write_analysis(
    results: Sequence[Mapping[str, Any]],
    folder: Path,
    test_set: str = "test",
    scope: str = "method",
    document: str = REGISTRATIONS["protocol"].document,
    notes: Sequence[str] = (),
) -> tuple[Path, Path]:
    """:func:`analysis_stem` ``.csv``, one row per comparison, and ``.md`` in ``folder``, titled with the
    ``document`` that registers the analysis; ``notes``: lines of the report between its preamble and its table."""
    rows = [_row(r) for r in results]
    _, title, intervals = _TITLES[scope]
    title = title.format(document=document)
    stem = analysis_stem(test_set, scope)
    csv_path = write_csv(Path(folder) / f"{stem}.csv", rows)
    body = []
    for r in results:
        c, d = r["comparison"], r["difference"]
        verdict = r["missing"] or (f"**resolved {r['direction']}**" if r["resolved"] else "not resolved")
        goal = "" if c.goal is None else f"{c.goal:+.2f}: {r['goal_reading'] or '–'}"
        holm_p = f"{r['p_holm']:.3g}"
        body.append(
            [c.family, f"{c.method} − {c.baseline}", str(c.num_labeled), str(d) if d else "no pairs", holm_p, verdict]
            + [goal]
        )
    lines = [
        f"# {title}, `{test_set}` rows",
        "",
        f"{intervals}; Holm within each family, over every comparison registered in it (one not complete counts "
        "with p = 1 and is not resolved). Goal: the project's goal for the difference, met when the lower bound is "
        "at or above it, excluded when the upper bound is below it, open otherwise.",
        "",
        *notes,
    ]
    lines += markdown_table(["family", "comparison", "L", "difference", "Holm p", "verdict", "goal"], body)
    md_path = Path(folder) / f"{stem}.md"
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path


def control_resolved(analysis_csv: Path, num_labeled: int) -> bool:
    """
    Stage B's rule (docs/protocol.md): whether the positive control's lift over random initialisation at
    ``num_labeled`` has a complete seed-aware interval above 0, in a validation analysis (``protocol_analysis_val.csv``
    written by :func:`write_analysis`).

    Raises:
        ValueError: the analysis has no row of the control against random at ``num_labeled``, naming the file.
    """
    with Path(analysis_csv).open(newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if (r["method"], r["baseline"], r["num_labeled"]) == ("supervised_encoder", "random", str(num_labeled))
        ]
    if not rows:
        raise ValueError(f"{analysis_csv} has no row of supervised_encoder - random at L = {num_labeled}.")
    return rows[0]["missing"] == "" and float(rows[0]["low"]) > 0
