"""The probe's data: labelled volumes loaded as slices, patient folds and their strata."""

import numpy as np
import pytest

from gcl_monai.probe import patient_folds
from tests.probe.probe_helpers import _volume


def test_patient_folds_are_disjoint_and_stratified():
    vols = [_volume(f"p{i:02d}", np.zeros((1, 2, 2), dtype=int)) for i in range(12)]
    groups = {f"p{i:02d}": "ab"[i % 2] for i in range(12)}
    folds = patient_folds(vols, 3, seed=1, groups=groups)
    assert sorted(p for f in folds for p in f) == sorted(groups)
    assert all(sum(groups[p] == "a" for p in f) == 2 for f in folds)
    with pytest.raises(ValueError, match="folds"):
        patient_folds(vols[:2], 3)


def test_volumes_are_loaded_slices_first_and_an_unlabelled_entry_is_refused():
    """The transform's channel-first (1, H, W, Z) arrays become (Z, 1, H, W) slices and a (Z, H, W) integer label map;
    the patient from "patient" (else "patient_id"), the name from the image's file (an HDF5 dataset name cut)."""
    import torch

    from gcl_monai.probe import load_probe_volumes

    image = torch.arange(2 * 3 * 4, dtype=torch.float64).reshape(1, 2, 3, 4)  # H 2, W 3, Z 4
    label = (image / 10).round() - 0.2  # near-integers, rounded on load

    def transform(item):
        return {**item, "image": image, "label": label}

    datalist = [
        {"image": "d/a.h5::image", "label": "x", "patient": "p7"},
        {"image": "b.nii.gz", "label": "y", "patient_id": 3},
    ]
    first, second = load_probe_volumes(datalist, transform)
    assert (first.patient, first.name, second.patient, second.name) == ("p7", "a.h5", "3", "b.nii.gz")
    assert first.image.shape == (4, 1, 2, 3) and first.image.dtype == torch.float32
    assert torch.equal(first.image[2, 0], image[0, ..., 2].float())
    assert first.label.dtype == torch.long and torch.equal(first.label[1], (image[0, ..., 1] / 10).round().long())
    along_first = load_probe_volumes(datalist[:1], transform, slice_axis=1)[0]  # slices along H
    assert along_first.image.shape == (2, 1, 3, 4)
    with pytest.raises(ValueError, match=r"'b.nii.gz' has no 'label'"):
        load_probe_volumes([{"image": "b.nii.gz", "patient": "p"}], transform)


def test_patient_groups_are_the_strata_or_none():
    from gcl_monai.probe import patient_groups

    datalist = [{"patient": "p1", "group": "DCM"}, {"patient": "p1", "group": "DCM"}, {"patient_id": 2, "group": 5}]
    assert patient_groups(datalist, "group") == {"p1": "DCM", "2": "5"}
    assert patient_groups(datalist, None) is None and patient_groups([*datalist, {"patient": "p3"}], "group") is None
