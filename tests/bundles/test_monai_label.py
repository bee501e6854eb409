"""The fine-tuned bundle loads and infers in MONAI Label (its BundleInferTask), on a 3D NIfTI volume.

monailabel is not among the dev extras; CI installs it (see ``.ci/run`` and the README's "MONAI Label" note), and
the plain test command skips this test when it is absent."""

import importlib.machinery
import shutil
import sys
import types
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import BasicUNet

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())


def _stub_torchvision(monkeypatch):
    """monailabel imports torchvision.utils for a debug transform only; no CPU torchvision wheel exists here.
    The stand-in raises if called, and is removed from ``sys.modules`` after the test."""
    if "torchvision" in sys.modules:
        return

    def unavailable(*args, **kwargs):
        raise RuntimeError("torchvision is not installed")

    tv = types.ModuleType("torchvision")
    utils = types.ModuleType("torchvision.utils")
    utils.make_grid = utils.save_image = unavailable
    tv.utils = utils
    tv.__spec__ = importlib.machinery.ModuleSpec("torchvision", None)
    utils.__spec__ = importlib.machinery.ModuleSpec("torchvision.utils", None)
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.utils", utils)


def test_bundle_infer_task_runs_on_nifti(tmp_path, monkeypatch):
    _stub_torchvision(monkeypatch)
    bundle_infer = pytest.importorskip("monailabel.tasks.infer.bundle", reason="monailabel is not installed")
    bundle = tmp_path / "gcl_demo"
    shutil.copytree(REPO / "bundles" / "gcl_demo" / "configs", bundle / "configs")
    (bundle / "models").mkdir()
    torch.manual_seed(0)
    net = BasicUNet(spatial_dims=2, in_channels=1, out_channels=4, features=(16, 32, 64, 128, 128, 16), norm="batch")
    # weights whose prediction is known: class 2 everywhere. MONAI Label loads model.pt non-strictly, so a model
    # whose parameter names did not match would run with random weights and fail this check.
    with torch.no_grad():
        net.final_conv.weight.zero_()
        net.final_conv.bias.copy_(torch.tensor([0.0, 0.0, 10.0, 0.0]))
    torch.save(net.state_dict(), bundle / "models" / "model.pt")

    volume = np.random.default_rng(0).random((70, 60, 9)).astype(np.float32)
    affine = np.diag([1.5, 1.4, 10.0, 1.0])
    image = tmp_path / "case.nii.gz"
    nib.save(nib.Nifti1Image(volume, affine), str(image))

    task = bundle_infer.BundleInferTask(str(bundle), conf={})
    assert task.is_valid()
    assert task.dimension == 3  # a 3D model on 3D volumes (metadata's spatial_shape), applied slice by slice
    assert set(task.labels) == {"right ventricle", "myocardium", "left ventricle"}
    label_file, _ = task({"image": str(image), "device": "cpu"})
    out = nib.load(label_file)
    assert out.shape == volume.shape
    # class 2 inside the central field of view the bundle keeps (fov_scale 0.8: rows 7..62, columns 6..53),
    # background where the crop was padded back by Invertd
    seg = np.asarray(out.dataobj)
    inside = np.zeros(volume.shape, bool)
    inside[7:63, 6:54] = True
    assert np.all(seg[inside] == 2) and np.all(seg[~inside] == 0)
    np.testing.assert_allclose(out.affine, affine, atol=1e-5)  # the label lies on the image
