"""The in-plane grid switch: resize, the data's own pixels, a physical spacing; each inverted by Invertd."""

import h5py
import nibabel as nib
import numpy as np
import pytest
from monai.transforms import Compose, EnsureChannelFirstd, Invertd, LoadImaged

from gcl_monai.transforms import H5Reader, in_plane_grid


def _volume(tmp_path, spacing_mm: float):
    """40 x 20 in-plane at ``spacing_mm``, 3 slices of 10 mm: a 10 x 6 block (label 1) in the centre."""
    label = np.zeros((40, 20, 3), np.float32)
    label[16:26, 6:12] = 1
    affine = np.diag([spacing_mm, spacing_mm, 10.0, 1.0])
    for name, array in (("img", label * 100), ("img_gt", label)):
        nib.save(nib.Nifti1Image(array, affine), str(tmp_path / f"{name}.nii.gz"))
    item = {"image": str(tmp_path / "img.nii.gz"), "label": str(tmp_path / "img_gt.nii.gz")}
    return Compose([LoadImaged(["image", "label"]), EnsureChannelFirstd(["image", "label"])])(item), label


def _pipeline_and_back(data, grid, size, **kwargs):
    transform = in_plane_grid(["image", "label"], grid, size, mode=["area", "nearest"], **kwargs)
    out = transform(dict(data))
    back = Invertd("label", transform=transform, orig_keys="label", nearest_interp=True)(dict(out))
    return out, back


def test_native_keeps_the_pixels_crops_and_pads_and_inverts(tmp_path):
    data, label = _volume(tmp_path, 0.7)
    out, back = _pipeline_and_back(data, "native", (16, 24))
    # rows: the central 16 of 40 (12..27); columns: 20 padded by 2 on each side; the block keeps its 10 x 6 pixels
    assert out["label"].shape == (1, 16, 24, 3)
    assert int((out["label"] == 1).sum()) == 10 * 6 * 3
    np.testing.assert_array_equal(np.asarray(out["label"][0, 4:14, 8:14]), 1)
    assert back["label"].shape == (1, 40, 20, 3)
    np.testing.assert_array_equal(np.asarray(back["label"][0]) == 1, label == 1)


def test_spacing_resamples_to_millimetres_and_inverts(tmp_path):
    data, label = _volume(tmp_path, 0.7)
    out, back = _pipeline_and_back(data, "spacing", (16, 16), pixel_spacing=1.4)
    # 40 x 20 pixels of 0.7 mm are 28 x 14 mm: 20 x 10 pixels of 1.4 mm, cropped to 16 rows and padded to 16 columns;
    # the 7 x 4.2 mm block covers about 5 x 3 pixels; the slices (10 mm) are kept
    assert out["label"].shape == (1, 16, 16, 3)
    assert np.allclose(out["label"].pixdim[:2], 1.4)
    assert 3 * 12 <= int((out["label"] == 1).sum()) <= 3 * 18
    assert back["label"].shape == (1, 40, 20, 3)
    overlap = (np.asarray(back["label"][0]) == 1) & (label == 1)
    assert 2 * overlap.sum() / ((np.asarray(back["label"][0]) == 1).sum() + (label == 1).sum()) > 0.8


def test_spacing_is_refused_by_name_for_a_layout_without_spacing(tmp_path):
    path = tmp_path / "patient001_frame01.h5"
    with h5py.File(path, "w") as f:
        f["image"] = np.zeros((3, 20, 40), np.float32)
    data = Compose([LoadImaged("image", reader=H5Reader(default_dataset="image")), EnsureChannelFirstd("image")])(
        {"image": str(path)}
    )
    with pytest.raises(RuntimeError) as raised:  # Compose names the step; the cause names the file
        in_plane_grid("image", "spacing", (16, 16))(data)
    assert isinstance(raised.value.__cause__, ValueError)
    assert "patient001_frame01.h5 (HDF5 layout) carries none" in str(raised.value.__cause__)
    assert in_plane_grid("image", "native", (16, 16))(data)["image"].shape == (1, 16, 16, 3)


def test_unknown_grid_and_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="grid must be one of"):
        in_plane_grid("image", "isotropic", (16, 16))
    with pytest.raises(ValueError, match="two in-plane sizes"):
        in_plane_grid("image", "native", (16, 16, 3))


@pytest.mark.parametrize("grid", ["resize", "native", "spacing"])
@pytest.mark.parametrize("fov_shape", ["scaled", "square"])
def test_an_image_without_its_label_passes_the_image_and_label_steps(tmp_path, grid, fov_shape):
    """With ``allow_missing_keys`` the field of view and the grid written for image and label take an unlabelled
    volume (the bundles' one volume pipeline), and the image comes out as it does beside its label."""
    from gcl_monai.transforms import field_of_view_crop

    data, _ = _volume(tmp_path, 1.0)
    steps = Compose(
        [
            field_of_view_crop(["image", "label"], 0.8, fov_shape, allow_missing_keys=True),
            in_plane_grid(["image", "label"], grid, [16, 16], mode=["area", "nearest"], allow_missing_keys=True),
        ]
    )
    image_only = steps({"image": data["image"]})
    assert set(image_only) == {"image"}
    np.testing.assert_array_equal(np.asarray(image_only["image"]), np.asarray(steps(dict(data))["image"]))
