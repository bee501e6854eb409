"""``pred_interp``: how the inference and evaluation bundles take a prediction back from the network's grid to the
volume's. ``nearest`` resamples the label map (each network pixel drawn as a block), ``bilinear`` the class
probabilities (the argmax taken on the volume's grid); hand-computed on a probability ramp."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser, ConfigWorkflow
from monai.transforms import SaveImaged

from gcl_monai.bundle import check_choice
from gcl_monai.transforms import SaveDicomSegd

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
DEMO = REPO / "bundles" / "gcl_demo" / "configs"
SIDE, NET, SLICES = 48, 32, 3  # the volume's in-plane side, the network's, the slices
CENTRE = 13.1  # the network-grid coordinate (first in-plane axis) where the ramp's class-1 logit crosses 0


def _taken_back(tmp_path: Path, pred_interp: str) -> np.ndarray:
    """``inference.json``'s post-processing (without the writers) on a logit ramp along the first in-plane axis of
    the network grid: the class map on the volume's grid."""
    image = tmp_path / "case.nii.gz"
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((SIDE, SIDE, SLICES), np.float32), np.eye(4)), image)
    parser = ConfigParser()
    parser.read_config(str(DEMO / "inference.json"))
    overrides = {"fov_scale": 1.0, "image_size": [NET, NET], "num_classes": 2, "keep_largest_component": False}
    parser.update({**overrides, "pred_interp": pred_interp, "output_dir": str(tmp_path)})
    data = parser.get_parsed_content("preprocessing")({"image": str(image)})
    assert data["image"].shape == (1, NET, NET, SLICES)
    logit = 0.6 * (torch.arange(NET, dtype=torch.float32) - CENTRE)
    ramp = logit[:, None, None].expand(NET, NET, SLICES)
    data["pred"] = torch.stack([torch.zeros_like(ramp), ramp])
    steps = parser.get_parsed_content("postprocessing").transforms
    for step in steps:
        if not isinstance(step, (SaveImaged, SaveDicomSegd)):
            data = step(data)
    pred = np.asarray(data["pred"])
    assert pred.shape == (1, SIDE, SIDE, SLICES)
    return pred[0]


def test_nearest_draws_each_network_pixel_as_a_block(tmp_path):
    classes = _taken_back(tmp_path, "nearest")
    x = np.arange(SIDE)
    source = np.floor(x * NET / SIDE).astype(int)  # torch's nearest neighbour
    expected = (source > CENTRE).astype(np.uint8)  # the label map's class 1 where the logit is positive
    np.testing.assert_array_equal(classes, np.broadcast_to(expected[:, None, None], classes.shape))


def test_bilinear_takes_the_argmax_of_the_interpolated_probabilities(tmp_path):
    classes = _taken_back(tmp_path, "bilinear")
    x = np.arange(SIDE)
    p1 = 1.0 / (1.0 + np.exp(-0.6 * (np.arange(NET) - CENTRE)))  # softmax of (0, logit): the class-1 probability
    source = np.clip((x + 0.5) * NET / SIDE - 0.5, 0, NET - 1)  # align_corners=False, clamped at the edges
    expected = (np.interp(source, np.arange(NET), p1) > 0.5).astype(np.uint8)
    np.testing.assert_array_equal(classes, np.broadcast_to(expected[:, None, None], classes.shape))
    # the boundary moves off the block edge: the nearest map switches class one pixel later
    nearest = _taken_back(tmp_path, "nearest")
    assert int(classes[:, 0, 0].argmax()) == 20 and int(nearest[:, 0, 0].argmax()) == 21


def test_an_unknown_pred_interp_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"pred_interp must be one of \('nearest', 'bilinear'\), got 'cubic'"):
        check_choice("pred_interp", "cubic", ("nearest", "bilinear"))
    for files in (str(DEMO / "inference.json"), [str(DEMO / "train.json"), str(DEMO / "evaluate.json")]):
        wf = ConfigWorkflow(config_file=files, workflow_type=None, bundle_root=str(tmp_path), pred_interp="cubic")
        with pytest.raises(RuntimeError) as raised:  # MONAI wraps what the initialize component raised
            wf.initialize()
        assert "pred_interp must be one of" in repr(raised.value) + repr(raised.value.__cause__)
