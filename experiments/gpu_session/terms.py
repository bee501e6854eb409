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

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_WAIT", "MIB", "PACK_SECONDS", "TERMS", "SessionTerms", "returned_violations", "travel_bytes"]

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


TERMS = SessionTerms()
#: seconds a gpu-run call keeps after its wait for packing and the transfers (measured on an H200, 2026-11-27: a
#: 510 s wait returned after 589 s)
PACK_SECONDS = 90
#: the longest a gpu-run call may wait before it packs: the command limit less the packing (what a call stopped
#: before it has packed does not come back)
MAX_WAIT = TERMS.command_seconds - PACK_SECONDS


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
