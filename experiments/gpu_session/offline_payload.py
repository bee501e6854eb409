"""
Everything a benchmark needs on an offline accelerator machine, in as few bytes as possible, its values restored bit
for bit.

Some GPU machines reach no package index and no shared drive, and take the files that come with a job under a size
cap. This script prepares, on a machine that has the data and the index, one folder (``.offline`` by default) to
send along with the repository, and restores it on the other side:

- ``pack SRC ARCHIVE``: a dataset folder as one ``.tar.xz``. HDF5 volumes whose float images hold integer
  multiples of one step (the ACDC files' intensities are ``k / max`` with integer ``k``) are stored as those
  integers and the divisor, which xz compresses about twice as well as the gzip-compressed floats; an integer array of
  two or more dimensions is stored as the residual of LOCO-I's median edge detector in each 2D plane (Weinberger et
  al., "The LOCO-I lossless image compression algorithm", IEEE TIP 2000, the predictor of JPEG-LS) with its high
  and low bytes in two planes, which xz compresses 18 % better than the integers themselves (12 ACDC volumes:
  4.66 against 5.67 MB); ``.nii.gz``
  files are stored decompressed (xz compresses the voxels better than gzip); any other file as it is. Every array
  is checked to reconstruct bit for bit before it is stored, its SHA-256 is recorded, and ``unpack`` checks it
  again. Shared ACDC folder (160 volumes, 90 MB as gzip-compressed HDF5): 44.5 MB (53.8 MB without the predictor).
- ``unpack ARCHIVE DEST``: the dataset folder again, with the same file names, dataset names, dtypes and values
  (HDF5 attributes and the gzip containers' own headers are not kept: a ``.nii.gz`` is re-compressed around the
  same bytes).
- ``split ARCHIVE --parts K`` (or ``--max-bytes N``): ``ARCHIVE`` cut into byte parts ``ARCHIVE.part0``,
  ``ARCHIVE.part1``, ... as equal as bytes allow, and their manifest ``ARCHIVE.parts.json`` (each part's size and
  SHA-256, and the whole archive's), for a payload too large to travel with one command beside the checkout: the
  parts go over consecutive commands while the machine is held, each command carrying only its own part (an ignored
  path an earlier command brought stays on the machine; carrying ``.offline`` whole would replace the folder and
  delete the parts sent before). The archive can then be removed here. ``terms.session_calls`` gives the
  number of parts; the rehearsal prints it (docs/gpu_run.md, "Travel budget").
- ``join ARCHIVE.parts.json``: the archive again, written only once every part is there with its size and SHA-256
  and the whole has the archive's; a missing or damaged part is named, to be sent again.
- ``wheels DEST``: the wheels of the packages this project needs beyond PyTorch, NumPy, SciPy, h5py, PyYAML,
  matplotlib and TensorBoard (which GPU images carry), at the versions installed here, for CPython 3.12 on
  x86-64 Linux (``--python-version`` to change). nibabel (3.3 MB, the largest) only with ``--with-nibabel``: a
  ``gpu-run`` comparison reads ACDC's HDF5 without it, the speed benchmark's synthetic dataset and the tests' data
  are NIfTI.

On the offline machine, ``benchmarks/offline_setup.sh`` installs the wheels into a private folder, joins the
archives that came in parts and unpacks the archives (``benchmarks/offline_data.sh``), and exports ``PYTHONPATH``
and ``GCL_DATA_ROOT`` (docs/benchmark.md, "On an offline GPU machine").
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Collection
from glob import escape as glob_escape
from importlib import metadata
from pathlib import Path

import numpy as np

from experiments.gpu_session.terms import part_sizes

__all__ = [
    "NIFTI_PACKAGES",
    "OFFLINE_PACKAGES",
    "PARTS_SUFFIX",
    "download_wheels",
    "join",
    "pack",
    "parts_manifest",
    "split",
    "unpack",
]

#: packages installed from wheels on the offline machine (its image has torch, numpy, scipy, h5py, yaml, ...): what
#: ``gpu-run``'s diagnosis and comparison need on ACDC's HDF5 (checked with nibabel blocked, docs/gpu_run.md)
OFFLINE_PACKAGES = ("monai", "pytorch-ignite", "fire", "termcolor")
#: what reading and writing NIfTI adds: the speed benchmark's synthetic dataset (``gpu-run``'s speed step, budgets
#: ``default`` and ``paper``) and the tests' data (``wheels --with-nibabel``)
NIFTI_PACKAGES = ("nibabel",)

_MANIFEST = "manifest.json"
#: the manifest of an archive cut into parts: ``ARCHIVE`` + this suffix, beside the parts ``ARCHIVE.part0``, ...
PARTS_SUFFIX = ".parts.json"
_PATIENT = re.compile(r"^patient\d+")


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _integer_encoding(values: np.ndarray) -> tuple[np.ndarray, int] | None:
    """
    ``(k, m)`` with integer ``k`` in uint16 such that ``float32(k / m)`` (computed in float64) equals ``values`` bit
    for bit, or None when the values are not of that form.
    """
    if values.dtype != np.float32 or values.size == 0 or not np.isfinite(values).all() or values.min() < 0:
        return None
    levels = np.unique(values)
    if len(levels) < 2 or len(levels) > 65536:
        return None
    divisor = int(np.rint(1.0 / np.diff(levels.astype(np.float64)).min()))
    if not 0 < divisor <= 65535:
        return None
    k = np.rint(values.astype(np.float64) * divisor)
    if k.max() > 65535:
        return None
    k = k.astype(np.uint16)
    if not np.array_equal(_decode(k, divisor).view(np.uint32), values.view(np.uint32)):
        return None
    return k, divisor


def _decode(k: np.ndarray, divisor: int) -> np.ndarray:
    return (k.astype(np.float64) / divisor).astype(np.float32)


def _median_edge(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """LOCO-I's prediction of a pixel from its left (``a``), upper (``b``) and upper-left (``c``) neighbours."""
    low, high = np.minimum(a, b), np.maximum(a, b)
    return np.where(c >= high, low, np.where(c <= low, high, a + b - c))


def _predictive_encoding(k: np.ndarray) -> np.ndarray:
    """
    ``k`` (uint16, ``(..., H, W)``) as ``(2, ...)`` uint8 planes (high bytes, low bytes) of the zigzag-coded
    residual of :func:`_median_edge` modulo 2**16 in each ``H x W`` plane (neighbours outside the plane are 0).
    """
    padded = np.zeros((*k.shape[:-2], k.shape[-2] + 1, k.shape[-1] + 1), np.int64)
    padded[..., 1:, 1:] = k
    predicted = _median_edge(padded[..., 1:, :-1], padded[..., :-1, 1:], padded[..., :-1, :-1])
    residual = (k.astype(np.int64) - predicted + 32768) % 65536 - 32768
    zigzag = np.where(residual >= 0, 2 * residual, -2 * residual - 1).astype(np.uint16)
    return np.stack([(zigzag >> 8).astype(np.uint8), (zigzag & 255).astype(np.uint8)])


def _predictive_decoding(planes: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_predictive_encoding`, one anti-diagonal of every plane at a time (a pixel's three
    neighbours lie on earlier anti-diagonals)."""
    zigzag = (planes[0].astype(np.int64) << 8) | planes[1]
    residual = np.where(zigzag % 2 == 0, zigzag // 2, -(zigzag + 1) // 2)
    height, width = residual.shape[-2:]
    padded = np.zeros((*residual.shape[:-2], height + 1, width + 1), np.int64)
    for diagonal in range(height + width - 1):
        i = np.arange(max(0, diagonal - width + 1), min(height - 1, diagonal) + 1)
        j = diagonal - i
        predicted = _median_edge(padded[..., i + 1, j], padded[..., i, j + 1], padded[..., i, j])
        padded[..., i + 1, j + 1] = (predicted + residual[..., i, j]) % 65536
    return padded[..., 1:, 1:].astype(np.uint16)


def _add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _patient_of(relative: Path) -> str | None:
    """The ACDC patient (``patientNNN``) a file belongs to, by its folder or its name; None for none."""
    for part in relative.parts:
        match = _PATIENT.match(part)
        if match:
            return match.group(0)
    return None


def pack(src: Path, archive: Path, preset: int = 6, patients: Collection[str] | None = None) -> dict:
    """
    Pack every file under ``src`` into ``archive`` (``.tar.xz``); returns the manifest.

    Args:
        src: the dataset folder.
        archive: the ``.tar.xz`` to write.
        preset: xz preset.
        patients: pack only the files of these ACDC patients (a folder or file name starting ``patientNNN``) and the
            files of no patient; None: every file.

    Raises:
        FileNotFoundError: when ``src`` is not a folder or holds no file.
    """
    import h5py

    src = Path(src)
    files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else []
    if patients is not None:
        kept = set(patients)
        files = [p for p in files if _patient_of(p.relative_to(src)) in kept | {None}]
    if not files:
        raise FileNotFoundError(f"{src} is not a folder with files to pack.")
    archive.parent.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    with tarfile.open(archive, "w:xz", preset=preset) as tar:
        for path in files:
            rel = path.relative_to(src).as_posix()
            if path.suffix == ".h5":
                entry: dict[str, dict] = {}
                with h5py.File(path, "r") as h5:
                    if h5.attrs:
                        raise ValueError(f"{path}: the file has attributes, which are not packed.")
                    for key, dataset in h5.items():
                        if not isinstance(dataset, h5py.Dataset):
                            raise ValueError(f"{path}: only top-level datasets are supported, {key!r} is a group.")
                        if dataset.attrs:
                            raise ValueError(f"{path}: dataset {key!r} has attributes, which are not packed.")
                        values = dataset[()]
                        encoded = _integer_encoding(values)
                        stored, divisor = (values, None) if encoded is None else encoded
                        predictive = encoded is not None and stored.ndim >= 2
                        if predictive:
                            planes = _predictive_encoding(stored)
                            if not np.array_equal(_predictive_decoding(planes), stored):
                                raise ValueError(f"{path}: {key!r} does not restore from its predictive encoding.")
                            stored = planes
                        _add(tar, f"{rel}/{key}.npy", _npy_bytes(stored))
                        entry[key] = {
                            "divisor": divisor,
                            "predictor": "median_edge" if predictive else None,
                            "dtype": str(values.dtype),
                            "sha256": _sha256(values),
                        }
                manifest[rel] = {"kind": "h5", "datasets": entry}
            elif path.name.endswith(".gz"):
                raw = gzip.decompress(path.read_bytes())
                _add(tar, rel[: -len(".gz")], raw)
                manifest[rel] = {"kind": "gzip", "sha256": hashlib.sha256(raw).hexdigest()}
            else:
                raw = path.read_bytes()
                _add(tar, rel, raw)
                manifest[rel] = {"kind": "file", "sha256": hashlib.sha256(raw).hexdigest()}
        _add(tar, _MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def unpack(archive: Path, dest: Path) -> list[Path]:
    """
    Restore the folder packed in ``archive`` under ``dest``; returns the files written.

    Raises:
        ValueError: when a restored array or file does not match the SHA-256 recorded at packing (a damaged archive).
    """
    import h5py

    dest = Path(dest)
    with tarfile.open(archive, "r:xz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        if _MANIFEST not in members:
            raise ValueError(f"{archive} has no {_MANIFEST}: not an archive written by `pack`.")
        manifest = json.loads(tar.extractfile(members[_MANIFEST]).read())
        written = []
        for rel, entry in manifest.items():
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            if entry["kind"] == "h5":
                with h5py.File(out, "w") as h5:
                    for key, info in entry["datasets"].items():
                        stored = np.load(io.BytesIO(tar.extractfile(members[f"{rel}/{key}.npy"]).read()))
                        if info.get("predictor") == "median_edge":  # archives packed before it have no key
                            stored = _predictive_decoding(stored)
                        values = stored if info["divisor"] is None else _decode(stored, info["divisor"])
                        if str(values.dtype) != info["dtype"] or _sha256(values) != info["sha256"]:
                            raise ValueError(f"{archive}: {rel}/{key} does not restore to the packed values.")
                        h5.create_dataset(key, data=values, compression="gzip", compression_opts=4)
            else:
                name = rel[: -len(".gz")] if entry["kind"] == "gzip" else rel
                raw = tar.extractfile(members[name]).read()
                if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
                    raise ValueError(f"{archive}: {rel} does not restore to the packed bytes.")
                out.write_bytes(gzip.compress(raw, compresslevel=6) if entry["kind"] == "gzip" else raw)
            written.append(out)
    return written


def parts_manifest(archive: Path) -> Path:
    """The manifest of ``archive``'s parts: ``ARCHIVE.parts.json`` beside it."""
    return archive.with_name(archive.name + PARTS_SUFFIX)


def _part_name(archive: Path, index: int) -> str:
    return f"{archive.name}.part{index}"


def _remove_stale_parts(archive: Path, kept: Collection[str]) -> None:
    """Removes the parts of an earlier split of ``archive`` (``ARCHIVE.partN``) that are not in ``kept``."""
    stale = [
        path
        for path in archive.parent.glob(f"{glob_escape(archive.name)}.part*")
        if re.fullmatch(re.escape(archive.name) + r"\.part\d+", path.name) and path.name not in kept
    ]
    for path in stale:
        path.unlink()


def split(archive: Path, parts: int) -> dict:
    """
    Cut ``archive`` into ``parts`` byte parts ``ARCHIVE.part0``, ``ARCHIVE.part1``, ... (as equal as bytes allow:
    :py:func:`experiments.gpu_session.terms.part_sizes`) and write their manifest ``ARCHIVE.parts.json`` (each
    part's name, size and SHA-256, and the whole archive's size and SHA-256); returns the manifest. Parts of an
    earlier split of the same archive that the new one does not write are removed. ``archive`` itself stays: remove
    it (or keep it elsewhere) when only the parts should travel; :py:func:`join` makes it again.

    Raises:
        FileNotFoundError: naming ``archive`` when it is not a file.
        ValueError: when ``parts`` is not between 1 and the archive's size.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"{archive} is not a file to split.")
    data = archive.read_bytes()
    entries, start = [], 0
    for index, size in enumerate(part_sizes(len(data), parts)):
        chunk = data[start : start + size]
        start += size
        name = _part_name(archive, index)
        (archive.parent / name).write_bytes(chunk)
        entries.append({"name": name, "bytes": size, "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {
        "archive": archive.name,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "parts": entries,
    }
    _remove_stale_parts(archive, {entry["name"] for entry in entries})
    parts_manifest(archive).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def join(manifest_path: Path) -> Path:
    """
    Join the parts that ``manifest_path`` (``ARCHIVE.parts.json``, written by :py:func:`split`) lists into ``ARCHIVE``
    beside it, after checking that every part is there with its size and SHA-256 and that the whole has the
    archive's; returns ``ARCHIVE``. Nothing is written under ``ARCHIVE``'s name unless every check passes.

    Raises:
        FileNotFoundError: naming every missing part (and saying to send them again).
        ValueError: naming every part whose size or SHA-256 differs from the manifest's, or when the joined bytes
            are not the archive's (a manifest of another split).
    """
    manifest_path = Path(manifest_path)
    manifest = json.loads(manifest_path.read_text())
    folder = manifest_path.parent
    archive = folder / manifest["archive"]
    missing = [str(folder / entry["name"]) for entry in manifest["parts"] if not (folder / entry["name"]).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{manifest_path}: {len(missing)} of {len(manifest['parts'])} parts missing: {', '.join(missing)}. "
            "Send them again (a machine that went back between calls keeps none of the parts sent before)."
        )
    joining = archive.with_name(archive.name + ".joining")
    whole, damaged = hashlib.sha256(), []
    with open(joining, "wb") as out:
        for entry in manifest["parts"]:
            path = folder / entry["name"]
            chunk = path.read_bytes()
            digest = hashlib.sha256(chunk).hexdigest()
            if len(chunk) != entry["bytes"] or digest != entry["sha256"]:
                damaged.append(
                    f"{path} ({len(chunk)} bytes, SHA-256 {digest[:12]}...; the manifest: {entry['bytes']} bytes, "
                    f"{entry['sha256'][:12]}...)"
                )
                continue
            out.write(chunk)
            whole.update(chunk)
    if damaged:
        joining.unlink()
        raise ValueError(f"{manifest_path}: damaged parts: {'; '.join(damaged)}. Send them again.")
    if whole.hexdigest() != manifest["sha256"]:
        joining.unlink()
        raise ValueError(
            f"{manifest_path}: the parts match their SHA-256 but not {archive.name}'s: the manifest and the parts "
            "come from different splits. Split the archive again and send every part and the manifest."
        )
    joining.replace(archive)
    return archive


def finetune_patients_of(returned: Path, data_root: Path) -> list[str]:
    """
    The patients the fine-tuning of a ``gpu-run`` reads
    (:py:func:`experiments.gpu_session.steps.finetune_patients`), from what one of its calls brought back.

    Raises:
        SystemExit: a pre-training of the run is not finished with its encoder brought back (it would need every
            pre-training patient).
    """
    from experiments.gpu_session import get_budget, unpack
    from experiments.gpu_session.steps import finetune_patients
    from experiments.status import read_status

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        state = unpack(returned, work)
        unfinished = [
            folder.parent.name
            for folder in sorted(work.glob("results/*/pretrain/*/benchmark.json"))
            if read_status(folder.parent).get("status") != "finished" or not (folder.parent / "encoder.pt").exists()
        ]
        if unfinished or not list(work.glob("results/*/pretrain/*/benchmark.json")):
            raise SystemExit(
                f"{returned}: pre-trainings not finished with their encoders ({', '.join(unfinished) or 'none ran'}): "
                "they need every pre-training patient; pack the whole dataset."
            )
        return finetune_patients(work, get_budget(state["budget"]), Path(data_root))


def download_wheels(dest: Path, python_version: str = "3.12", nifti: bool = False) -> list[str]:
    """Download the wheels of :data:`OFFLINE_PACKAGES` (and of :data:`NIFTI_PACKAGES` with ``nifti``) at the versions
    installed here; returns the requirements."""
    packages = OFFLINE_PACKAGES + (NIFTI_PACKAGES if nifti else ())
    requirements = [f"{name}=={metadata.version(name)}" for name in packages]
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--implementation=cp",
            f"--python-version={python_version}",
            *platforms,
            f"--dest={dest}",
            *requirements,
        ],
        check=True,
    )
    return requirements


def _split_command(archive: Path, parts: int | None, max_bytes: int | None) -> None:
    """``split``: the parts (``--parts``, or the fewest of at most ``--max-bytes``), written and listed."""
    if not archive.is_file():
        raise SystemExit(f"{archive} is not a file to split.")
    if max_bytes is not None:
        if max_bytes < 1:
            raise SystemExit(f"--max-bytes {max_bytes}: a part holds at least one byte.")
        parts = -(-archive.stat().st_size // max_bytes)
    try:
        manifest = split(archive, parts)
    except ValueError as error:
        raise SystemExit(f"offline_payload split: {error}") from None
    for entry in manifest["parts"]:
        print(f"{archive.parent / entry['name']}: {entry['bytes']:,} bytes")
    print(
        f"{parts_manifest(archive)}: the manifest. Remove {archive} (or keep it elsewhere) before the calls: "
        "benchmarks/offline_setup.sh joins the parts where the archive is absent."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.gpu_session.offline_payload", description=__doc__.split("\n")[1]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="pack a dataset folder into a .tar.xz")
    p.add_argument("src", type=Path)
    p.add_argument("archive", type=Path)
    p.add_argument("--preset", type=int, default=6, help="xz preset (0-9)")
    p.add_argument(
        "--patients-of",
        type=Path,
        default=None,
        metavar="RETURNED",
        help="pack only the patients that the fine-tuning of a gpu-run reads (validation, test, labelled draws), "
        "from what a call brought back (RETURNED), once both its pre-trainings are finished",
    )
    u = commands.add_parser("unpack", help="restore a packed dataset folder")
    u.add_argument("archive", type=Path)
    u.add_argument("dest", type=Path)
    split_help = (
        "cut an archive into byte parts ARCHIVE.part0, ... and their manifest ARCHIVE.parts.json, to send over "
        "several calls; ARCHIVE can then be removed (benchmarks/offline_setup.sh joins the parts where it is absent)"
    )
    c = commands.add_parser("split", help=split_help, description=split_help)
    c.add_argument("archive", type=Path)
    size = c.add_mutually_exclusive_group(required=True)
    size.add_argument("--parts", type=int, metavar="K", help="K parts, as equal as bytes allow")
    size.add_argument("--max-bytes", type=int, metavar="N", help="the fewest equal parts of at most N bytes each")
    join_help = (
        "check every part that ARCHIVE.parts.json lists (presence, size, SHA-256) and join them into ARCHIVE; a "
        "missing or damaged part is named, and nothing is written"
    )
    j = commands.add_parser("join", help=join_help, description=join_help)
    j.add_argument("manifest", type=Path, metavar="ARCHIVE.parts.json")
    w = commands.add_parser("wheels", help="download the wheels the offline machine lacks")
    w.add_argument("dest", type=Path)
    w.add_argument("--python-version", default="3.12")
    w.add_argument(
        "--with-nibabel",
        action="store_true",
        help="also nibabel (3.3 MB): the speed benchmark's synthetic dataset (gpu-run's speed step: budgets default "
        "and paper) and the tests' data are NIfTI; a comparison on ACDC's HDF5 needs none",
    )
    args = parser.parse_args(argv)
    if args.command == "pack":
        patients = None if args.patients_of is None else finetune_patients_of(args.patients_of, args.src.parent)
        manifest = pack(args.src, args.archive, args.preset, patients)
        size = args.archive.stat().st_size / 2**20
        print(f"{args.archive}: {len(manifest)} files from {args.src}, {size:.1f} MiB")
        if patients is not None:
            print(f"patients of the fine-tuning: {len(patients)} ({', '.join(patients)})")
    elif args.command == "unpack":
        print(f"{args.dest}: {len(unpack(args.archive, args.dest))} files restored from {args.archive}")
    elif args.command == "split":
        _split_command(args.archive, args.parts, args.max_bytes)
    elif args.command == "join":
        try:
            archive = join(args.manifest)
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f"offline_payload join: {error}") from None
        print(f"{archive}: joined from the parts that {args.manifest} lists, every SHA-256 checked")
    else:
        for requirement in download_wheels(args.dest, args.python_version, args.with_nibabel):
            print(requirement)


if __name__ == "__main__":
    main()
