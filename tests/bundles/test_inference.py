"""Inference as a clinical-research folder needs it: 4D series segmented frame by frame (or a clear error naming
the file and the frame option), non-finite input repaired with a warning naming the file or refused, and in a
folder of cases every readable one written, every failure reported by name, a non-zero exit status at the end."""

from __future__ import annotations

import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser

from tests.bundles.bundle_inference import run_bundle_inference, run_inference

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
DEMO = REPO / "bundles" / "gcl_demo" / "configs"
FEATURES = [8, 8, 16, 16, 32, 8]
AFFINE = np.diag([1.5, 1.4, 10.0, 1.0])


def _nifti(path: Path, data: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(data.astype(np.float32), AFFINE), str(path))
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    parser = ConfigParser()
    parser.read_config(str(DEMO / "inference.json"))
    parser["features"] = FEATURES
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "model.pt"
    torch.save(parser.get_parsed_content("network_def").state_dict(), path)
    return path


def test_folder_with_bad_cases_writes_the_good_ones_and_fails_at_the_end(tmp_path, model_file):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cases"
    _nifti(folder / "good.nii.gz", rng.random((40, 36, 3)))
    partly_nan = rng.random((40, 36, 3))
    partly_nan[:4] = np.nan
    _nifti(folder / "partly_nan.nii.gz", partly_nan)
    _nifti(folder / "cine.nii.gz", rng.random((40, 36, 3, 2)))
    _nifti(folder / "all_nan.nii.gz", np.full((40, 36, 3), np.nan))
    (folder / "corrupt.nii.gz").write_bytes(b"\x1f\x8b truncated")
    result = run_inference(DEMO / "inference.json", folder, tmp_path / "out", model_file, FEATURES)
    assert result.returncode != 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["cine_frame00_seg.nii.gz", "cine_frame01_seg.nii.gz", "good_seg.nii.gz", "partly_nan_seg.nii.gz"]
    for name in written:
        seg = nib.load(str(tmp_path / "out" / name))
        assert seg.shape == (40, 36, 3)
        np.testing.assert_allclose(seg.affine, AFFINE, atol=1e-5)
    log = result.stdout + result.stderr
    assert "2 of 6 case(s) could not be segmented" in log
    assert f"{folder / 'all_nan.nii.gz'}: ValueError" in log and "no finite intensity" in log
    assert str(folder / "corrupt.nii.gz") in log
    assert f"{folder / 'partly_nan.nii.gz'}: 432 of 4320 voxels are NaN" in log


def test_one_frame_of_a_4d_series(tmp_path, model_file):
    folder = tmp_path / "cases"
    _nifti(folder / "cine.nii.gz", np.random.default_rng(1).random((40, 36, 3, 3)))
    result = run_inference(DEMO / "inference.json", folder, tmp_path / "out", model_file, FEATURES, "--frame", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cine_frame02_seg.nii.gz"]


def test_a_bundle_copied_out_of_the_repository_runs_its_inference_there(tmp_path, model_file):
    """A bundle is a folder that runs as it is wherever it is copied: from inside it, as the model-zoo's bundles run,
    its paths (``bundle_root`` ``"."``: ``models/model.pt``, the ``eval`` output folder) are the copy's own."""
    bundle = tmp_path / "elsewhere" / "gcl_demo"
    shutil.copytree(REPO / "bundles" / "gcl_demo", bundle, ignore=shutil.ignore_patterns("outputs", "models", "eval"))
    (bundle / "models").mkdir()
    shutil.copy(model_file, bundle / "models" / "model.pt")
    _nifti(bundle / "cases" / "case.nii.gz", np.random.default_rng(2).random((40, 36, 3)))
    result = run_bundle_inference("configs/inference.json", "cases", FEATURES, cwd=bundle)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [p.name for p in (bundle / "eval").iterdir()] == ["case_seg.nii.gz"]
    assert nib.load(str(bundle / "eval" / "case_seg.nii.gz")).shape == (40, 36, 3)
