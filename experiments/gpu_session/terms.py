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
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["MIB", "TERMS", "SessionTerms", "returned_violations", "travel_bytes"]

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


def _blocks(path: Path) -> int:
    """``path``'s size rounded up to whole :py:data:`BLOCK` s (an empty file counts nothing)."""
    return -(-path.lstat().st_size // BLOCK) * BLOCK


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
