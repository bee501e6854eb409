"""
The terms of a time-limited GPU session (issue 33), and checks of what travels to it and what comes back.

- at most :py:attr:`SessionTerms.tree_bytes` of working tree travel with each command (tracked files, untracked files
  that git does not ignore, and the carried paths), counted by :py:func:`travel_bytes` in whole blocks of
  :py:data:`BLOCK` bytes per file (see there: the tool's own count is not documented);
- at most :py:attr:`SessionTerms.max_files` files come back from the output folder, none over
  :py:attr:`SessionTerms.max_file_bytes`, together at most :py:attr:`SessionTerms.max_total_bytes`, none deeper than
  :py:attr:`SessionTerms.max_depth` folders, each named in letters, digits, ``.``, ``_`` and ``-``;
- one command at a time, at most :py:attr:`SessionTerms.command_seconds`; :py:attr:`SessionTerms.device_seconds` of
  device time in all, the machine's start included.

A payload too large for one command travels in parts over consecutive commands while the machine is held (an ignored
path an earlier command brought stays there): :py:func:`session_calls` plans those commands.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = [
    "MIB",
    "TERMS",
    "CallPlan",
    "SessionTerms",
    "part_sizes",
    "returned_violations",
    "session_calls",
    "travel_bytes",
]

MIB = 1 << 20
#: the unit in which :py:func:`travel_bytes` counts each file (a file system's block)
BLOCK = 4096
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class SessionTerms:
    """The limits of one session of a GPU machine (the numbers of the device tool's README, "Limits")."""

    max_files: int = 8
    max_file_bytes: int = 16 * MIB
    max_total_bytes: int = 64 * MIB
    max_depth: int = 2
    #: the README says 64 MiB; on 2026-11-26 the tool refused a tree of 66.8 MB counted file by file in bytes (63.7
    #: MiB; 68.0 MB in 4 KiB blocks) and took one of 62.7 MB (63.8 MB in blocks). 64 MB (decimal), counted in blocks,
    #: agrees with both answers and with either of the tool's possible readings (decimal megabytes, or blocks).
    tree_bytes: int = 64_000_000
    command_seconds: int = 600
    device_seconds: int = 900
    #: seconds a gpu-run call keeps after its wait for packing and the transfers (measured on an H200, 2026-11-27: a
    #: 510 s wait returned after 589 s)
    pack_seconds: int = 90

    @property
    def max_wait(self) -> int:
        """The longest a call may wait before it packs: the command limit less the packing (what a call stopped
        before it has packed does not come back)."""
        return self.command_seconds - self.pack_seconds

    @staticmethod
    def add_options(parser: argparse.ArgumentParser) -> None:
        """One option per limit (``--tree-bytes``, ``--max-files``, ...), its default this class's."""
        group = parser.add_argument_group("session terms", "the limits of a GPU session (defaults: SessionTerms)")
        for limit in fields(SessionTerms):
            group.add_argument(
                "--" + limit.name.replace("_", "-"),
                type=int,
                default=limit.default,
                help=f"{_HELP[limit.name]} (default {limit.default})",
            )

    @classmethod
    def from_options(cls, args: argparse.Namespace) -> SessionTerms:
        """The terms that :py:meth:`add_options`' options parsed into ``args``."""
        return cls(**{limit.name: getattr(args, limit.name) for limit in fields(cls)})

    def as_options(self) -> list[str]:
        """The command-line options that give these terms to another call (those that differ from the defaults)."""
        default = SessionTerms()
        return [
            option
            for limit in fields(self)
            if getattr(self, limit.name) != getattr(default, limit.name)
            for option in ("--" + limit.name.replace("_", "-"), str(getattr(self, limit.name)))
        ]


_HELP = {
    "max_files": "files that come back from the output folder, at most",
    "max_file_bytes": "bytes of one returned file, at most",
    "max_total_bytes": "bytes of all returned files, at most",
    "max_depth": "folders a returned file lies below the output folder, at most",
    "tree_bytes": "bytes of working tree (in whole blocks per file) that travel with each command, at most",
    "command_seconds": "seconds one command runs, at most",
    "device_seconds": "seconds of device time of a session, its start included",
    "pack_seconds": "seconds a call keeps after its wait for packing and the transfers",
}

#: the default terms (the device tool's README, "Limits")
TERMS = SessionTerms()


def returned_violations(out_dir: Path, terms: SessionTerms = TERMS) -> list[str]:
    """
    What in ``out_dir`` would not come back from the machine under ``terms`` (empty: everything comes back).

    Args:
        out_dir: the output folder (``$OUT``).
        terms: the limits.
    """
    out_dir = Path(out_dir)
    files = sorted(p for p in out_dir.rglob("*") if not p.is_dir())
    problems = []
    if len(files) > terms.max_files:
        problems.append(f"{len(files)} files in {out_dir}, at most {terms.max_files} come back")
    total = 0
    for path in files:
        relative = path.relative_to(out_dir)
        if path.is_symlink() or not path.is_file():
            problems.append(f"{relative}: not a plain file")
            continue
        size = path.stat().st_size
        total += size
        if size > terms.max_file_bytes:
            problems.append(f"{relative}: {size / MIB:.1f} MiB, over {terms.max_file_bytes / MIB:.0f} MiB")
        if len(relative.parts) - 1 > terms.max_depth:
            problems.append(f"{relative}: {len(relative.parts) - 1} folders deep, at most {terms.max_depth}")
        bad = [part for part in relative.parts if not _NAME.match(part)]
        if bad:
            problems.append(f"{relative}: names other than letters, digits, '.', '_' and '-': {bad}")
    if total > terms.max_total_bytes:
        problems.append(f"{total / MIB:.1f} MiB in all, at most {terms.max_total_bytes / MIB:.0f} MiB come back")
    return problems


def in_blocks(size: int) -> int:
    """``size`` bytes rounded up to whole :py:data:`BLOCK` s, as :py:func:`travel_bytes` counts a file (0 stays 0)."""
    return -(-size // BLOCK) * BLOCK


def _blocks(path: Path) -> int:
    """``path``'s size rounded up to whole :py:data:`BLOCK` s (an empty file counts nothing)."""
    return in_blocks(path.lstat().st_size)


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return _blocks(path)
    return sum(_blocks(p) for p in path.rglob("*") if p.is_symlink() or p.is_file())


def travel_bytes(repo: Path, carry: Sequence[str] = ()) -> dict[str, int]:
    """
    Bytes of working tree that travel with each command from the checkout ``repo``: the files git tracks or does not
    ignore, and each carried path (ignored paths named in the call's ``carry``), each file rounded up to whole
    :py:data:`BLOCK` s, so that the count is not below the tool's whichever way it counts (:py:class:`SessionTerms`).

    Args:
        repo: the checkout's root.
        carry: carried paths, relative to ``repo``.

    Returns:
        ``{"tree": bytes, <carried path>: bytes, ..., "total": bytes}``.

    Raises:
        FileNotFoundError: naming a carried path that does not exist.
    """
    repo = Path(repo)
    listed = (
        subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    sizes = {"tree": sum(_size(repo / name) for name in listed if name and (repo / name).exists())}
    for path in carry:
        if not (repo / path).exists():
            raise FileNotFoundError(f"carried path {repo / path} does not exist.")
        sizes[path] = _size(repo / path)
    sizes["total"] = sum(sizes.values())
    return sizes


def part_sizes(total: int, parts: int) -> list[int]:
    """
    The sizes of ``total`` bytes cut into ``parts`` consecutive parts as equal as bytes allow: the first ``total %
    parts`` parts one byte longer than the others (so the last part is never the longest).

    Raises:
        ValueError: when ``parts`` is not between 1 and ``total``.
    """
    if not 1 <= parts <= total:
        raise ValueError(f"{total} bytes cannot be cut into {parts} non-empty parts.")
    size, longer = divmod(total, parts)
    return [size + 1] * longer + [size] * (parts - longer)


@dataclass(frozen=True)
class CallPlan:
    """The commands that bring a payload to a machine, in order: the payload's parts and each command's bytes."""

    #: bytes of each part of the payload (one part: the payload travels whole, not split)
    parts: tuple[int, ...]
    #: bytes that travel with each command (the payload's parts counted in whole blocks), in order
    calls: tuple[int, ...]
    #: the limit each command is within
    limit: int

    def describe(self) -> str:
        """The plan in one line: the number of calls, then each call's bytes (MiB) against the limit."""
        each = ", ".join(f"{call / MIB:.1f}" for call in self.calls)
        split = "the payload whole" if len(self.parts) == 1 else f"the payload in {len(self.parts)} parts"
        return f"{len(self.calls)} call(s), {split}: {each} MiB (limit {self.limit / MIB:.1f} MiB each)"


def session_calls(checkout: int, wheels: int, payload: int, results: int, limit: int, carry: int = 0) -> CallPlan:
    """
    The fewest commands that bring a session its payload within ``limit`` bytes each. When everything fits one
    command, it all travels whole. Otherwise the payload is cut into :py:func:`part_sizes` parts (``offline_payload
    split --parts K``): the first command carries the checkout, the carry (a resumed session's ``.offline/carry``)
    and the first part; each later one the checkout and one part; the last also the wheels, the parts' manifest (one
    block) and the results' allowance. A part counts in whole :py:data:`BLOCK` s. A first session (a new pre-training
    seed) sends the whole dataset and no carry; a second one the dataset cut to the fine-tuning's patients and the
    carry with the finished encoders.

    Args:
        checkout: bytes of the checkout (:py:func:`travel_bytes`' total, already in blocks).
        wheels: bytes of the wheels.
        payload: bytes of the payload (the archive).
        results: bytes allowed for the results and logs.
        limit: bytes that may travel with one command (:py:attr:`SessionTerms.tree_bytes`).
        carry: bytes of the carry (0: none).

    Raises:
        ValueError: naming the sum, when not even the smallest part (one block) fits beside the checkout and the
            carry, or beside the checkout, the wheels and the results.
    """
    if payload < 1:
        raise ValueError(f"a payload of {payload} bytes: nothing to send.")
    whole = checkout + wheels + carry + in_blocks(payload) + results
    if whole <= limit:
        return CallPlan((payload,), (whole,), limit)
    first_fixed = checkout + carry
    last_fixed = checkout + wheels + results + BLOCK  # the manifest of a split payload
    if max(first_fixed, last_fixed) + BLOCK > limit:
        raise ValueError(
            f"no part of the payload fits: the first call's checkout {checkout / MIB:.1f} + carry {carry / MIB:.1f} "
            f"MiB or the last call's checkout + wheels {wheels / MIB:.1f} + results {results / MIB:.1f} MiB with a "
            f"manifest, each with a one-block part, are over the limit of {limit / MIB:.1f} MiB"
        )
    count = 2
    # the parts of part_sizes: the first is the longest, the last the shortest
    while first_fixed + in_blocks(-(-payload // count)) > limit or last_fixed + in_blocks(payload // count) > limit:
        count += 1  # ends by parts of one block at most, which fit (checked above)
    sizes = part_sizes(payload, count)
    calls = [checkout + in_blocks(size) for size in sizes]
    calls[0] += carry
    calls[-1] += wheels + results + BLOCK
    return CallPlan(tuple(sizes), tuple(calls), limit)
