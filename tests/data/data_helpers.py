"""Tiny dataset files in every layout that the tests of gcl_monai.data write, and where the real data lies."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import nibabel as nib
import numpy as np

SHAPE = (16, 16, 6)
REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
DATA_ROOT = Path(os.environ.get("GCL_DATA_ROOT", REPO.parent / "shared" / "data"))


def write_nifti(path: Path, shape=SHAPE, dtype=np.int16) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(np.zeros(shape, dtype=dtype), np.eye(4)), path)
    return path


def write_h5(path: Path, image_shape=(6, 16, 16), label_shape=(6, 16, 16), keys=("image", "label")) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        if "image" in keys:
            f.create_dataset("image", data=np.zeros(image_shape, np.float32))
        if "label" in keys:
            f.create_dataset("label", data=np.zeros(label_shape, np.uint8))
    return path


def write_garbage(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a medical image" * 10)
    return path


def make_acdc_patient(folder: Path, number: int, ed: int = 1, es: int = 12, group: str | None = "DCM") -> Path:
    name = f"patient{number:03d}"
    pdir = folder / name
    pdir.mkdir(parents=True)
    group_line = f"Group: {group}\n" if group else ""
    info = f"ED: {ed}\nES: {es}\n{group_line}Height: 184.0\nNbFrame: 30\nWeight: 95.0\n"
    (pdir / "Info.cfg").write_text(info)
    for frame in (ed, es):
        write_nifti(pdir / f"{name}_frame{frame:02d}.nii.gz")
        write_nifti(pdir / f"{name}_frame{frame:02d}_gt.nii.gz", dtype=np.uint8)
    write_nifti(pdir / f"{name}_4d.nii.gz", shape=(*SHAPE, 3))
    return pdir
