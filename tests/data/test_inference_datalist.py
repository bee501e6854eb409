"""The cases of an inference folder (gcl_monai.data.inference_datalist): every image, one entry per frame of a 4D
series, labels and other files left out, a missing folder refused."""

import pytest

from gcl_monai.data import inference_datalist
from tests.data.data_helpers import write_nifti


def test_inference_datalist_lists_every_frame_of_a_4d_series(tmp_path):
    write_nifti(tmp_path / "a.nii.gz", (8, 8, 3))
    write_nifti(tmp_path / "sub" / "cine.nii.gz", (8, 8, 3, 4))
    write_nifti(tmp_path / "a_gt.nii.gz", (8, 8, 3))
    (tmp_path / "broken.nii.gz").write_bytes(b"not a nifti file")
    (tmp_path / "notes.txt").write_text("not an image")
    items = inference_datalist(tmp_path)
    assert items == [
        {"image": str(tmp_path / "a.nii.gz")},
        {"image": str(tmp_path / "broken.nii.gz")},  # listed: its failure is reported by name when loaded
        *({"image": str(tmp_path / "sub" / "cine.nii.gz"), "frame": t} for t in range(4)),
    ]
    assert inference_datalist(tmp_path, frame=2)[-1] == {"image": str(tmp_path / "sub" / "cine.nii.gz"), "frame": 2}
    with pytest.raises(FileNotFoundError, match="inference folder"):
        inference_datalist(tmp_path / "missing")
