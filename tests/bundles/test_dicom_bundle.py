"""bundles/gcl_dicom end to end on a generated DICOM archive: GCL pre-training from the folder (meta labels read from
the headers), and inference from DICOM series to NIfTI and DICOM SEG with unreadable series named and the run failing
at the end."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

pydicom = pytest.importorskip("pydicom")
hd = pytest.importorskip("highdicom")

from monai.bundle import ConfigParser, ConfigWorkflow

from gcl_monai.data import load_split
from gcl_monai.data.dicom import index_dicom, write_phantom_dicom
from gcl_monai.data.dicom.inference import dicom_inference_cases
from tests.bundles.bundle_inference import run_inference

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
CONFIGS = REPO / "bundles" / "gcl_dicom" / "configs"
FEATURES = [4, 4, 8, 8, 16, 4]
TINY = {"image_size": [32, 32], "features": FEATURES, "batch_size": 4, "epochs": 1}


def test_pretraining_from_a_dicom_folder(tmp_path):
    archive = write_phantom_dicom(tmp_path / "archive", num_patients=3, image_size=(32, 32), layout="per_slice")
    (archive / "notes.txt").write_text("not DICOM")
    root = tmp_path / "bundle"
    wf = ConfigWorkflow(
        config_file=str(CONFIGS / "pretrain.json"),
        workflow_type=None,
        run_id="pretrain",
        bundle_root=str(root),
        dataset_dir=str(archive),
        meta_labels=["patient_id", "slice_quantile", "cardiac_phase", "MagneticFieldStrength"],
        **TINY,
    )
    wf.initialize()
    wf.run()
    wf.finalize()
    assert (root / "outputs" / "pretrain" / "gcl" / "encoder.pt").is_file()
    entries = load_split(root / "outputs" / "split.json")["pretrain"]
    assert len(entries) == 6  # every patient pre-trains: ED and ES of 3 patients
    for entry in entries:
        assert Path(entry["image"]).parent == root / "outputs" / "dicom_cache" / "volumes"
        assert entry["MagneticFieldStrength_name"] in ("1.5", "3.0") and entry["cardiac_phase"] in range(4)
    trainer = wf.parser.get_parsed_content("train#trainer")
    assert trainer.meta_labels == ["patient_id", "slice_quantile", "cardiac_phase", "MagneticFieldStrength"]
    assert trainer.state.iteration == len(wf.parser.get_parsed_content("train#dataloader"))


def _model(path: Path, case: dict) -> Path:
    """A BasicUNet whose output classes are the quartiles of one feature of its last layer on ``case``, so that its
    label map holds every class (a random network predicts one class everywhere)."""
    parser = ConfigParser()
    parser.read_config(str(CONFIGS / "inference.json"))
    parser.update({"features": FEATURES, "image_size": [32, 32]})
    net = parser.get_parsed_content("network_def").eval()
    image = parser.get_parsed_content("preprocessing")(case)["image"][None]
    features = []
    hook = net.network.final_conv.register_forward_hook(lambda module, args, out: features.append(args[0][:, 0]))
    with torch.no_grad():
        net(image)
    hook.remove()
    q = torch.quantile(torch.cat(features).flatten(), torch.tensor([0.25, 0.5, 0.75]))
    scale = 100.0 / float(q[2] - q[0])
    with torch.no_grad():  # logit_c = scale * (c f - q_1 - ... - q_c): class c wins where q_c < f < q_(c+1)
        net.network.final_conv.weight.zero_()
        net.network.final_conv.weight[:, 0] = scale * torch.arange(4.0)[:, None, None]
        net.network.final_conv.bias.copy_(-scale * torch.cat([torch.zeros(1), torch.cumsum(q, 0)]))
    torch.save(net.state_dict(), path)
    return path


@pytest.mark.slow  # about 30 s on 2 CPU cores (a bundle run in a subprocess)
def test_inference_from_dicom_writes_nifti_and_seg_and_names_unreadable_series(tmp_path):
    archive = tmp_path / "archive"
    write_phantom_dicom(archive / "cine_a", num_patients=2, image_size=(32, 32), layout="single_series")
    write_phantom_dicom(archive / "cine_b", num_patients=1, seed=1, image_size=(32, 32), layout="per_slice")
    volumes = {v.volume_id: v for v in index_dicom(archive).volumes}
    # patient002 (cine_a): one ES slice lost; patient001 (cine_a): one ED slice's pixel data cut short
    es = next(v for v in volumes.values() if v.patient == "patient002" and v.phase == 1 and "cine_a" in v.files[0])
    Path(es.files[2]).unlink()
    ed = next(v for v in volumes.values() if v.patient == "patient001" and v.phase == 0 and "cine_a" in v.files[0])
    data = Path(ed.files[1]).read_bytes()
    Path(ed.files[1]).write_bytes(data[: len(data) - 500])
    good = [v for v in volumes.values() if v not in (es, ed)]
    model = _model(tmp_path / "model.pt", dicom_inference_cases(archive / "cine_b", tmp_path / "probe")[0])

    out = tmp_path / "out"
    result = run_inference(
        CONFIGS / "inference.json", archive, out, model, FEATURES, "--keep_largest_component", "False"
    )
    assert result.returncode != 0
    assert "2 of 6 case(s) could not be segmented (the other 4 were written)" in result.stderr
    assert f"series {es.series[0]}: slice missing at" in result.stderr
    assert f"patient001_series1_t0ms_{ed.volume_id[:6]}:" in result.stderr  # named by patient, series and phase
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 2 * len(good)
    for volume in good:
        (nifti,) = out.glob(f"*_{volume.volume_id[:6]}_seg.nii.gz")
        label = np.asarray(nib.load(nifti).dataobj)
        assert label.shape == (32, 32, len(volume.files)) and set(np.unique(label)) == {0, 1, 2, 3}
        seg = hd.seg.segread(nifti.with_name(nifti.name.replace(".nii.gz", ".dcm")))
        assert {s.SeriesInstanceUID for s in seg.ReferencedSeriesSequence} == set(volume.series)
        seg_volume = seg.get_volume(combine_segments=True)
        for k, header in enumerate(volume.headers):  # the SEG frame at each source slice = the NIfTI's slice k
            index = round(float(np.linalg.solve(seg_volume.affine, [*header["ImagePositionPatient"], 1.0])[0]))
            np.testing.assert_array_equal(seg_volume.array[index], label[..., k].T)
