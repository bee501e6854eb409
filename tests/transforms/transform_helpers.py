"""Files and items that the tests of gcl_monai.transforms write or build."""

from __future__ import annotations

import h5py
import nibabel as nib
import numpy as np
import torch
from monai.data import MetaTensor


def write_h5(path, image_zhw: np.ndarray, label_zhw: np.ndarray | None = None) -> str:
    """Write arrays stored (Z, H, W) like the SSL4MIS files; return the path."""
    with h5py.File(path, "w") as f:
        f.create_dataset("image", data=image_zhw)
        if label_zhw is not None:
            f.create_dataset("label", data=label_zhw)
    return str(path)


def write_nifti(path, array_xyz: np.ndarray) -> str:
    nib.save(nib.Nifti1Image(array_xyz, np.eye(4)), str(path))
    return str(path)


def volume_item(shape=(1, 8, 6, 5), patient_id=3, organ_state=1, filename="vol.nii.gz") -> dict:
    image = MetaTensor(torch.rand(shape), meta={"filename_or_obj": filename})
    label = MetaTensor(torch.randint(0, 4, shape).float(), meta={"filename_or_obj": filename})
    return {"image": image, "label": label, "patient_id": patient_id, "organ_state": organ_state, "patient": "p3"}
