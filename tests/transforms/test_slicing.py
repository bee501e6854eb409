"""VolumeToSlicesd and slice_quantiles: slices, their meta labels through collation, bad inputs."""

from __future__ import annotations

import pytest
import torch
from monai.data import DataLoader, Dataset, MetaTensor, list_data_collate

from gcl_monai.transforms import VolumeToSlicesd, slice_quantiles
from tests.transforms.transform_helpers import volume_item


@pytest.mark.parametrize(
    "num_slices, expected",
    [
        (4, [1, 2, 3, 4]),
        (6, [1, 1, 2, 3, 3, 4]),
        (9, [1, 1, 1, 2, 2, 3, 3, 4, 4]),
        (10, [1, 1, 1, 2, 2, 3, 3, 3, 4, 4]),
    ],
)
def test_slice_quantiles(num_slices, expected):
    assert slice_quantiles(num_slices, 4) == expected
    out = VolumeToSlicesd()(volume_item(shape=(1, 8, 6, num_slices)))
    assert [int(o["slice_quantile"]) for o in out] == expected
    assert [int(o["slice_index"]) for o in out] == list(range(num_slices))


def test_volume_to_slices_content_meta_and_types():
    item = volume_item(shape=(2, 8, 6, 5))
    item["image"].affine = torch.diag(torch.tensor([2.0, 3.0, 10.0, 1.0], dtype=torch.float64))
    out = VolumeToSlicesd()(item)
    assert len(out) == 5
    for s, slice_item in enumerate(out):
        assert isinstance(slice_item["image"], MetaTensor) and slice_item["image"].shape == (2, 8, 6)
        assert torch.equal(slice_item["image"].as_tensor(), item["image"][..., s].as_tensor())
        assert torch.equal(slice_item["label"].as_tensor(), item["label"][..., s].as_tensor())
        assert slice_item["image"].meta["filename_or_obj"] == "vol.nii.gz"
        assert slice_item["image"].affine.shape == (3, 3) and slice_item["image"].affine[0, 0] == 2.0
        for key in ("patient_id", "organ_state", "slice_quantile", "slice_index"):
            assert slice_item[key].dtype == torch.int64 and slice_item[key].ndim == 0
        assert int(slice_item["patient_id"]) == 3 and int(slice_item["organ_state"]) == 1
        assert slice_item["patient"] == "p3"
    along_first = VolumeToSlicesd(slice_axis=0)(volume_item(shape=(1, 4, 6, 5)))
    assert len(along_first) == 4 and along_first[0]["image"].shape == (1, 6, 5)


def test_volume_to_slices_meta_keys_survive_collation():
    out = VolumeToSlicesd()(volume_item(shape=(1, 8, 6, 6), patient_id=7, organ_state=0))
    batch = list_data_collate(out)
    assert batch["image"].shape == (6, 1, 8, 6)
    for key in ("patient_id", "organ_state", "slice_quantile", "slice_index"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (6,)
    assert batch["slice_quantile"].tolist() == [1, 1, 2, 3, 3, 4]
    volumes = [volume_item(shape=(1, 8, 6, 4), patient_id=1), volume_item(shape=(1, 8, 6, 4), patient_id=2)]
    loader = DataLoader(Dataset(volumes, transform=VolumeToSlicesd()), batch_size=2)  # lists are flattened
    batch = next(iter(loader))
    assert batch["patient_id"].tolist() == [1] * 4 + [2] * 4 and batch["patient_id"].dtype == torch.int64
    assert batch["image"].shape == (8, 1, 8, 6)


def test_volume_to_slices_bad_inputs():
    with pytest.raises(ValueError, match=r"short\.nii\.gz has 3 slices"):
        VolumeToSlicesd()(volume_item(shape=(1, 8, 6, 3), filename="short.nii.gz"))
    item = volume_item(filename="odd.nii.gz")
    item["label"] = MetaTensor(torch.zeros(1, 8, 7, 5))
    with pytest.raises(ValueError, match=r"spatial shapes differ in odd\.nii\.gz"):
        VolumeToSlicesd()(item)
    with pytest.raises(KeyError, match=r"'cycle_phase'.*available keys.*patient_id"):
        VolumeToSlicesd(meta_keys=("patient_id", "cycle_phase"))(volume_item())
    out = VolumeToSlicesd(meta_keys=("patient_id", "cycle_phase"), allow_missing_keys=True)(volume_item())
    assert "cycle_phase" not in out[0] and int(out[0]["patient_id"]) == 3
    with pytest.raises(TypeError, match="organ_state"):
        VolumeToSlicesd()({**volume_item(), "organ_state": 0.5})
    with pytest.raises(ValueError, match="channel-first 3D volume"):
        VolumeToSlicesd()({**volume_item(), "image": torch.zeros(8, 6, 5), "label": torch.zeros(8, 6, 5)})
