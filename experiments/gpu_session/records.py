"""
An experiment's records, kept where they outlive the machine that runs it (``keep``), and put back on a new machine
(``restore``) so that the run goes on from there.

A long CPU experiment (docs/protocol.md's stage C: about 20 core-hours) spans several sessions, and a session may
find a new machine holding only what was committed. The records are the text files of the experiment folder: the
plan, the split, the progress log, ``results.csv`` and each cell's ``benchmark.json`` and ``dice.json``. They are
what a rerun needs to skip a finished fine-tuning cell and what the analysis reads. The weights (fine-tuned models,
encoders, checkpoints) and the TensorBoard files stay behind: about 8 MB per cell. A pre-training whose encoder
stayed behind is made again when a cell still needs it. Its status keeps the encoder's fingerprint, and a rerun
that makes other bytes fails loudly (:py:func:`experiments.fingerprints.made_encoder`), or, when asked, takes the
new encoder and sets the first encoder's cells aside (:py:mod:`~experiments.gpu_session.remade`).

Records are kept in a folder, or in one ``.tar.xz`` archive (``into`` ending in :py:data:`ARCHIVE_SUFFIX`): a
finished experiment's hundreds of small files then travel as one file (every file of a checkout travels to a GPU
session in whole blocks: :py:func:`experiments.gpu_session.terms.travel_bytes`). ``restore`` takes either.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.plan import read_plan
from gcl_monai.utils import atomic_write

__all__ = ["ARCHIVE_SUFFIX", "RECORD_SUFFIXES", "keep", "plan_checkout", "record_files", "restore"]

#: records kept as one archive: ``keep`` into, and ``restore`` from, a path with this suffix
ARCHIVE_SUFFIX = ".tar.xz"

#: the suffixes of an experiment's records (text): statuses, Dice, plan and split, progress log, results and tables,
#: a pre-training's probe history (``probe_history.jsonl``: the probe's Dice and seconds per probed epoch)
RECORD_SUFFIXES = (".json", ".jsonl", ".csv", ".log", ".md")


def record_files(folder: Path) -> Iterator[Path]:
    """The records under ``folder`` (:py:data:`RECORD_SUFFIXES`; files being written, ``*.tmp``, left out)."""
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.suffix in RECORD_SUFFIXES:
            yield path


def _copy(source: Path, target: Path, replacements: Sequence[tuple[str, str]] = ()) -> int:
    count = 0
    for path in record_files(source):
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_bytes()  # bytes: line endings stay as written
        for old, new in replacements:
            text = text.replace(old.encode(), new.encode())
        destination.write_bytes(text)
        shutil.copystat(path, destination)
        count += 1
    return count


def plan_checkout(plan: Mapping[str, Any]) -> Path:
    """The checkout that ran the experiment of ``plan`` (:func:`~experiments.plan.read_plan`): the parent of its
    ``bundle_dir``."""
    return Path(plan["bundle_dir"]).parent


def _relative_paths(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """
    The rewrites that make the records' paths relative to the checkout that ran the experiment of ``plan``
    (:func:`plan_checkout`): its data folders as seen from the checkout (``../shared/data``), then the checkout
    itself. A rerun from the root of a checkout reads them as they were.
    """
    checkout = plan_checkout(plan)
    roots = [plan[key] for key in ("data_root", "test_root") if plan.get(key)]
    rewrites = [(root, os.path.relpath(root, checkout)) for root in roots]
    # the longer path first: a data folder inside the checkout becomes relative as a whole
    return sorted(rewrites, key=lambda pair: -len(pair[0])) + [(f"{checkout}/", "")]


def keep(experiment: Path, into: Path) -> int:
    """
    Copies the records of the experiment folder ``experiment`` into ``into`` (the same layout; a folder, or one
    archive where ``into`` ends in :py:data:`ARCHIVE_SUFFIX`), replacing the copies kept there before; files of
    ``into`` that ``experiment`` no longer has are left as they are. The paths in them
    are made relative to the checkout that ran the experiment (:py:func:`_relative_paths`): no machine's folders in
    a committed file.

    Returns:
        the number of files copied.

    Raises:
        FileNotFoundError: ``experiment`` holds no ``plan.json`` (not an experiment folder).
    """
    experiment, into = Path(experiment), Path(into)
    rewrites = _relative_paths(read_plan(experiment))
    if not _is_archive(into):
        return _copy(experiment, into, rewrites)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "records"
        if into.exists():
            _extract(into, folder)
        count = _copy(experiment, folder, rewrites)
        with atomic_write(into) as partial, tarfile.open(partial, "w:xz") as tar:  # never half an archive
            for path in record_files(folder):
                tar.add(path, arcname=path.relative_to(folder).as_posix())
    return count


def restore(kept: Path, experiment: Path) -> int:
    """
    Copies the records kept in ``kept`` (a folder, or an archive ending in :py:data:`ARCHIVE_SUFFIX`) into the
    experiment folder ``experiment`` of a new machine, where the same command, run from the root of the checkout,
    then goes on with the cells left.

    Returns:
        the number of files copied.

    Raises:
        FileNotFoundError: ``kept`` holds no ``plan.json`` (or the archive ``kept`` does not exist).
        FileExistsError: ``experiment`` exists and is not empty: its cells may be newer than the records, and
            nothing of a run is overwritten.
    """
    kept, experiment = Path(kept), Path(experiment)
    if not _is_archive(kept):
        return _restore_folder(kept, experiment, kept)
    with tempfile.TemporaryDirectory() as tmp:
        _extract(kept, Path(tmp))
        return _restore_folder(Path(tmp), experiment, kept)


def _restore_folder(folder: Path, experiment: Path, kept: Path) -> int:
    """:py:func:`restore` from the folder ``folder`` holding the records of ``kept`` (itself, or its extraction)."""
    if not (folder / "plan.json").is_file():
        raise FileNotFoundError(f"{kept} holds no plan.json: no experiment's records were kept there.")
    if experiment.exists() and any(experiment.iterdir()):
        raise FileExistsError(
            f"{experiment} exists and is not empty: its cells may be newer than the records in {kept}. Restore into "
            "a results folder of a new machine only (or move this one aside first)."
        )
    return _copy(folder, experiment)


def _is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIX)


def _extract(archive: Path, folder: Path) -> None:
    """Extracts the records archive ``archive`` into ``folder`` (regular files and folders only, inside it)."""
    if not archive.is_file():
        raise FileNotFoundError(f"{archive} does not exist: no records were kept there.")
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(folder, filter="data")
