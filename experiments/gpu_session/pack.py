"""
What a ``gpu-run`` command brings back, within the session terms (:py:mod:`~experiments.gpu_session.terms`),
and how a fresh machine resumes from it.

The output folder gets at most ``max_files`` files, none in a sub-folder:

- ``gpu_run.json``: the run's state (each step's status) and the list of what the archive holds and left behind;
- ``report.md``: the steps, the diagnosis, the speed figures and the comparison's table, readable as it is;
- ``speed_cuda.json`` (``speed_cpu.json`` in a rehearsal), once measured;
- ``run.tgz.00``, ``run.tgz.01``, ...: one gzip-compressed tar of the work folder cut into parts of at most
  ``max_file_bytes`` (``cat run.tgz.* | tar xz`` joins them): every result, log, status and TensorBoard file, then,
  while the terms leave room, in this order, the ``encoder.pt`` of each finished pre-training (float32, exact),
  the last checkpoint of each unfinished one (its floating-point tensors as bfloat16, half the bytes: the
  resumed run goes on from weights and momentum rounded to bfloat16) and each finished pre-training's kept encoder
  (bfloat16 with its card, under ``encoders/``: :py:mod:`~experiments.gpu_session.kept_encoders`; last, as the
  next call keeps it again from the ``encoder.pt``). Fine-tuned models and the data stay behind: the results need
  neither, and a finished cell is never run again. A pre-training whose weights find no room is named in
  ``left_behind``: a fresh machine pre-trains it again and fine-tunes its method's cells again (a kept encoder
  left behind is named there too, and only comes back with a later call).

:py:func:`unpack` restores a work folder from such an output folder (the checkpoints back to float32).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from experiments.gpu_session.kept_encoders import ENCODERS, collect_encoders
from experiments.gpu_session.records import RECORD_SUFFIXES
from experiments.gpu_session.remade import DISCARDED, set_aside
from experiments.gpu_session.state import LOCK_FILE, STATE_FILE
from experiments.gpu_session.terms import TERMS, SessionTerms
from experiments.status import STATUS_FILE, read_status
from gcl_monai.handlers import latest_checkpoint
from gcl_monai.utils import atomic_write

__all__ = ["ARCHIVE", "BF16_SUFFIX", "COLLECTED", "REPORT", "collect", "extract", "pack", "repack", "unpack"]

logger = logging.getLogger("experiments")

ARCHIVE = "run.tgz"
REPORT = "report.md"
#: suffix, inside the archive, of a checkpoint whose floating-point tensors were stored as bfloat16
BF16_SUFFIX = ".bf16"
#: the files of the comparison's folder that :py:func:`collect` copies (what docs/results keeps of an experiment)
COLLECTED = (
    "results.csv",
    "table.md",
    "plan.json",
    "split.json",
    "progress.log",
    "dice_vs_L.png",
    "pretrain_curves.png",
)
#: folders of the work folder never packed: the data (generated or unpacked on each machine)
_LEFT_OUT_DIRS = ("data",)
#: headroom for the tar and gzip framing around the files' bytes
_FRAMING = 1.02


def _cast(value: Any, source: torch.dtype, target: torch.dtype) -> Any:
    """``value`` (nested dicts, lists, tuples of tensors and other values), every ``source`` tensor as ``target``."""
    if isinstance(value, torch.Tensor):
        return value.to(target) if value.dtype == source else value
    if isinstance(value, dict):
        return {k: _cast(v, source, target) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, source, target) for v in value)
    return value


def _small_files(work: Path, kept_encoders: bool) -> Iterable[Path]:
    left_out = _LEFT_OUT_DIRS if kept_encoders else (*_LEFT_OUT_DIRS, ENCODERS)
    for path in sorted(work.rglob("*")):
        relative = path.relative_to(work)
        if not path.is_file() or relative.parts[0] in left_out:
            continue
        if path.suffix in (".pt", ".pth", ".tmp") or path.name == LOCK_FILE:
            continue
        yield path


def _pretrain_folders(work: Path) -> list[Path]:
    return sorted(p.parent for p in work.glob(f"results/*/pretrain/*/{STATUS_FILE}"))


def _weights(work: Path, encoders_bf16: bool, kept_encoders: bool) -> list[tuple[Path, bool]]:
    """The weights worth bringing back, most useful first: (path, store as bfloat16)."""
    kept = [(path, False) for path in sorted(work.glob(f"{ENCODERS}/*/*.pt"))] if kept_encoders else []
    finished, unfinished = [], []
    for folder in _pretrain_folders(work):
        status = read_status(folder).get("status")
        if status == "finished" and (folder / "encoder.pt").exists():
            finished.append((folder / "encoder.pt", encoders_bf16))
        elif status not in ("finished", "collapsed") and (checkpoint := latest_checkpoint(folder)):
            unfinished.append((Path(checkpoint), True))
    return finished + unfinished + kept


def pack(
    work: Path,
    out: Path,
    report: str,
    extra: Iterable[Path] = (),
    terms: SessionTerms = TERMS,
    encoders_bf16: bool = False,
    kept_encoders: bool = True,
) -> dict:
    """
    Writes what comes back into ``out`` (see the module's description).

    Args:
        work: the run's work folder.
        out: the output folder (``$OUT``); earlier parts in it are replaced.
        report: the text of ``report.md``.
        extra: further files copied as they are (the speed JSON).
        terms: the limits the returned files keep.
        encoders_bf16: store the finished encoders' tensors as bfloat16 too (half the bytes: a carry to the next
            session, :py:func:`repack`); else in float32, exact.
        kept_encoders: bring back the kept encoders (``encoders/``); the carry to the next session leaves them out.

    Returns:
        the manifest written into ``gpu_run.json``: ``packed`` and ``left_behind`` (paths relative to ``work``),
        ``parts``.
    """
    work, out = Path(work), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{ARCHIVE}.*"):
        old.unlink()
    (out / REPORT).write_text(report)
    fixed = [out / REPORT]
    for path in extra:
        shutil.copyfile(path, out / path.name)
        fixed.append(out / path.name)
    # gpu_run.json is written last and is at most a few kB: 64 kB are kept for it
    reserved = sum(p.stat().st_size for p in fixed) + (64 << 10)
    max_parts = terms.max_files - len(fixed) - 1
    room = min(terms.max_total_bytes - reserved, max_parts * terms.max_file_bytes) / _FRAMING
    small = list(_small_files(work, kept_encoders))
    packed, left_behind = [str(p.relative_to(work)) for p in small], []
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / ARCHIVE
        with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
            for path in small:
                try:
                    tar.add(path, arcname=str(path.relative_to(work)))
                except FileNotFoundError:  # replaced or removed by the running worker since it was listed
                    packed.remove(str(path.relative_to(work)))
            for path, half in _weights(work, encoders_bf16, kept_encoders):
                relative = str(path.relative_to(work))
                try:
                    if half:
                        converted = Path(tmp) / "checkpoint.bf16"
                        torch.save(
                            _cast(
                                torch.load(path, map_location="cpu", weights_only=True), torch.float32, torch.bfloat16
                            ),
                            converted,
                        )
                        path, relative = converted, relative + BF16_SUFFIX
                    # what is packed counts by its compressed bytes, the next weights by their raw bytes
                    tar.fileobj.flush()
                    if archive.stat().st_size + path.stat().st_size > room:
                        left_behind.append(relative)
                        continue
                    tar.add(path, arcname=relative)
                except (FileNotFoundError, RuntimeError) as error:  # a checkpoint the worker replaced meanwhile
                    logger.warning("Not packed: %s (%s); the next call packs the newer one.", relative, error)
                    left_behind.append(relative + (BF16_SUFFIX if half and not relative.endswith(BF16_SUFFIX) else ""))
                    continue
                packed.append(relative)
        parts = _split(archive, out, terms.max_file_bytes)
    state = json.loads((work / STATE_FILE).read_text())
    manifest = {"parts": [p.name for p in parts], "packed": packed, "left_behind": left_behind}
    (out / STATE_FILE).write_text(json.dumps({**state, "returned": manifest}, indent=1))
    return manifest


def _split(archive: Path, out: Path, part_bytes: int) -> list[Path]:
    parts = []
    with open(archive, "rb") as source:
        while chunk := source.read(part_bytes):
            part = out / f"{ARCHIVE}.{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    return parts


def extract(returned: Path, work: Path) -> None:
    """
    The archive's parts in ``returned`` joined and extracted into ``work``, as they were packed (nothing converted
    or set aside: :py:func:`unpack` does that to resume a run).

    Raises:
        FileNotFoundError: ``returned`` holds no ``run.tgz.*`` parts.
    """
    parts = sorted(Path(returned).glob(f"{ARCHIVE}.*"))
    if not parts:
        raise FileNotFoundError(f"{returned} holds no {ARCHIVE}.* parts of an earlier gpu-run.")
    Path(work).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        joined = Path(tmp) / ARCHIVE
        with open(joined, "wb") as sink:
            sink.writelines(part.read_bytes() for part in parts)
        with tarfile.open(joined, "r:gz") as tar:
            tar.extractall(work, filter="data")


def unpack(returned: Path, work: Path) -> dict:
    """
    Restores a work folder from the files a ``gpu-run`` command brought back (``returned``): the archive's parts
    joined and extracted, each bfloat16 checkpoint written back as float32 under its own name, and each pre-training
    whose weights were left behind set aside with its method's fine-tuning cells (:py:func:`_discard_pretraining`).
    A fine-tuning cell that did not finish (trained but not yet evaluated: its model stayed behind) is set aside too,
    so that it is trained again.

    Returns:
        the state read from the archive.

    Raises:
        FileNotFoundError: ``returned`` holds no ``run.tgz.*`` parts.
        ValueError: ``work`` already holds a run.
    """
    returned, work = Path(returned), Path(work)
    if (work / STATE_FILE).exists():
        raise ValueError(f"{work} already holds a run ({STATE_FILE}); unpack into an empty work folder.")
    extract(returned, work)
    for half in work.rglob(f"*{BF16_SUFFIX}"):
        full = half.with_name(half.name[: -len(BF16_SUFFIX)])
        with atomic_write(full) as partial:
            torch.save(
                _cast(torch.load(half, map_location="cpu", weights_only=True), torch.bfloat16, torch.float32), partial
            )
        half.unlink()
    returned_state = json.loads((returned / STATE_FILE).read_text()) if (returned / STATE_FILE).exists() else {}
    for path in returned_state.get("returned", {}).get("left_behind", []):
        if Path(path).parts[0] != ENCODERS:  # a kept encoder left behind is kept again from its encoder.pt
            _discard_pretraining(work / Path(path).parent)
    for cell in sorted(p for p in work.glob("results/*/finetune/*") if p.is_dir()):
        if read_status(cell).get("status") != "finished":  # its model, or its partial run's, stayed behind
            set_aside(cell)
    return json.loads((work / STATE_FILE).read_text())


#: a pre-training's folder, ``<method>`` or ``<method>_p<pre-training seed>``, and a fine-tuning cell's,
#: ``<method>_L<L>_d<draw>_s<seed>`` with ``_p<pre-training seed>`` for a seed above 0
_PRETRAIN_NAME = re.compile(r"^(?P<method>.+?)(?:_p(?P<seed>\d+))?$")
_CELL_NAME = re.compile(r"^(?P<method>.+)_L(?:all|\d+)_d\d+_s\d+(?:_p(?P<seed>\d+))?$")


def _discard_pretraining(folder: Path) -> None:
    """
    A pre-training whose weights stayed on the last machine runs again from scratch here: its folder (status,
    TensorBoard scalars) and the fine-tuning cells of its method and pre-training seed (which loaded the encoder that
    stayed behind; gpu-run's methods fine-tune their own pre-training) are moved to ``discarded/``, so that no row
    of the comparison mixes two encoders.
    """
    experiment = folder.parents[1]
    pretraining = _PRETRAIN_NAME.match(folder.name)
    owner = (pretraining["method"], int(pretraining["seed"] or 0))
    cells = [
        cell
        for cell in sorted((experiment / "finetune").glob("*_L*"))
        if (match := _CELL_NAME.match(cell.name)) and (match["method"], int(match["seed"] or 0)) == owner
    ]
    moved = [folder, *cells]
    for path in moved:
        set_aside(path)
    logger.warning(
        "The weights of %s stayed on the last machine: it pre-trains again; moved to %s: %s.",
        folder,
        experiment / DISCARDED,
        ", ".join(p.name for p in moved),
    )


def collect(returned: Path, into: Path) -> list[Path]:
    """
    The results of what a ``gpu-run`` call brought back, as docs/results keeps an experiment: the comparison's
    :py:data:`COLLECTED` files, ``report.md``, ``gpu_run.json``, the speed JSON and the diagnosis' ``report.md``
    (as ``diagnosis.md``) copied into ``into``, and the kept encoders (bfloat16 with their cards) into
    ``into/encoders/``; no other weights. The device's checkout (the parent of the experiment's
    ``bundle_dir`` in its ``plan.json``) is written as paths relative to the repository in the text files.

    Returns:
        the files written.

    Raises:
        FileNotFoundError: ``returned`` holds no ``run.tgz.*`` parts.
    """
    returned, into = Path(returned), Path(into)
    into.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        unpack(returned, Path(tmp) / "work")
        work = Path(tmp) / "work"
        pairs = [(returned / name, into / name) for name in (REPORT, STATE_FILE)]
        pairs += [(path, into / path.name) for path in returned.glob("speed_*.json")]
        pairs.append((work / "diagnose" / "report.md", into / "diagnosis.md"))
        checkouts = set()
        for experiment in sorted(work.glob("results/*/plan.json")):
            pairs += [(experiment.parent / name, into / name) for name in COLLECTED]
            checkouts.add(str(Path(json.loads(experiment.read_text())["bundle_dir"]).parent))
        for source, target in pairs:
            if not source.exists():
                continue
            data = source.read_bytes()
            # records may name the device's checkout; replaced as bytes, so that line endings stay as written
            if source.suffix in RECORD_SUFFIXES:
                for checkout in checkouts:
                    data = data.replace(f"{checkout}/".encode(), b"")
            target.write_bytes(data)
            written.append(target)
        written += collect_encoders(work, into)
    return written


def repack(returned: Path, out: Path, max_bytes: int, terms: SessionTerms = TERMS) -> dict:
    """
    What a ``gpu-run`` call brought back, packed again into at most ``max_bytes`` (the room the working tree leaves
    for carrying it to a fresh machine), the finished encoders as bfloat16 (18.9 MB at the paper's width in float32,
    9.4 MB so; the fine-tuning that loads one starts from weights rounded by at most 2^-9 of their value, of the order
    of its first Adam steps at 1e-4): the weights that do not fit are left behind, and with them their
    pre-trainings' folders (TensorBoard scalars) and their methods' cells, which the fresh machine runs again
    (:py:func:`unpack`); what the fresh machine would set aside (``discarded/``) is not carried.

    Returns:
        the manifest of the new pack (``left_behind`` names what did not fit).
    """
    returned, out = Path(returned), Path(out)
    terms = dataclasses.replace(terms, max_total_bytes=max_bytes)
    report = (returned / REPORT).read_text() if (returned / REPORT).exists() else ""
    speed = sorted(returned.glob("speed_*.json"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        unpack(returned, work)
        trial = pack(work, Path(tmp) / "trial", report, speed, terms=terms, encoders_bf16=True, kept_encoders=False)
        left_behind = trial["left_behind"]
        # what the fresh machine would set aside travels not at all: the pre-trainings left behind, their cells
        for path in left_behind:
            _discard_pretraining(work / Path(path).parent)
        for folder in work.glob("results/*/discarded"):
            shutil.rmtree(folder)
        if out.exists():
            shutil.rmtree(out)
        manifest = pack(work, out, report, speed, terms=terms, encoders_bf16=True, kept_encoders=False)
    manifest["left_behind"] = sorted(set(manifest["left_behind"]) | set(left_behind))
    state = json.loads((out / STATE_FILE).read_text())
    (out / STATE_FILE).write_text(json.dumps({**state, "returned": manifest}, indent=1))
    return manifest
