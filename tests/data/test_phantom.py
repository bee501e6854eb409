"""Synthetic cardiac phantom: determinism, ACDC-reader round trip and anatomical plausibility."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from gcl_monai.data import ACDC_GROUPS, generate_acdc_phantom, load_datalist, read_acdc, synthesize_patient
from gcl_monai.data.phantom import main

NUM_PATIENTS = 5


@pytest.fixture(scope="module")
def phantom(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = generate_acdc_phantom(tmp_path_factory.mktemp("phantom"), num_patients=NUM_PATIENTS, seed=0)
    return root, read_acdc(root)


def load(path: str) -> np.ndarray:
    return np.asarray(nib.load(path).dataobj)


def test_deterministic_for_a_seed():
    info_a, frames_a = synthesize_patient(np.random.default_rng([0, 1]), "HCM")
    info_b, frames_b = synthesize_patient(np.random.default_rng([0, 1]), "HCM")
    _, frames_c = synthesize_patient(np.random.default_rng([1, 1]), "HCM")
    assert info_a == info_b and frames_a.keys() == frames_b.keys()
    for frame in frames_a:
        np.testing.assert_array_equal(frames_a[frame][0], frames_b[frame][0])
        np.testing.assert_array_equal(frames_a[frame][1], frames_b[frame][1])
    ed_a, ed_c = frames_a[1][0], frames_c[1][0]
    assert ed_a.shape != ed_c.shape or not np.array_equal(ed_a, ed_c)


def test_files_deterministic(tmp_path: Path, phantom):
    root, datalist = phantom
    again = read_acdc(generate_acdc_phantom(tmp_path, num_patients=1, seed=0))
    for a, b in zip(again, datalist[:2]):
        np.testing.assert_array_equal(load(a["image"]), load(b["image"]))
        np.testing.assert_array_equal(load(a["label"]), load(b["label"]))


def test_reader_round_trip(phantom):
    root, datalist = phantom
    assert load_datalist(root) == datalist
    assert len(datalist) == 2 * NUM_PATIENTS
    assert [d["organ_state"] for d in datalist] == [0, 1] * NUM_PATIENTS
    assert [d["group"] for d in datalist[::2]] == list(ACDC_GROUPS)
    assert [d["patient"] for d in datalist[::2]] == [f"patient{i:03d}" for i in range(1, NUM_PATIENTS + 1)]
    info = (root / "training" / "patient001" / "Info.cfg").read_text().splitlines()
    assert [line.split(":")[0] for line in info] == ["ED", "ES", "Group", "Height", "NbFrame", "Weight"]
    assert info[0] == "ED: 1" and 8 <= int(info[1].split(":")[1]) <= 14
    zooms = nib.load(datalist[0]["image"]).header.get_zooms()
    assert 1.3 < zooms[0] == zooms[1] < 1.8 and zooms[2] == 10.0


def test_anatomy(phantom):
    _, datalist = phantom
    for ed, es in zip(datalist[::2], datalist[1::2]):
        image, label, label_es = load(ed["image"]), load(ed["label"]), load(es["label"])
        assert image.shape == label.shape == label_es.shape and image.shape[:2] == (128, 128)
        assert 8 <= label.shape[2] <= 12
        assert set(np.unique(label)) == {0, 1, 2, 3}
        for lab in (label, label_es):
            assert (lab[..., 0] == 1).any() and (lab[..., 0] == 3).any()  # base: RV and LV
            assert not (lab[..., -1] == 1).any() and (lab[..., -1] == 2).any()  # apex: no RV, myocardium
        assert (label_es == 3).sum() < (label == 3).sum()  # LV cavity smaller at ES
        assert (label_es == 1).sum() < (label == 1).sum()  # RV smaller at ES
        lv_area = (label == 3).sum(axis=(0, 1))
        assert lv_area[0] > lv_area[-1]  # structures shrink towards the apex


def test_images_not_a_threshold(phantom):
    _, datalist = phantom
    image, label = load(datalist[0]["image"]).astype(float), load(datalist[0]["label"])
    lv, rv, myo = image[label == 3].mean(), image[label == 1].mean(), image[label == 2].mean()
    assert abs(lv - rv) < 0.25 * lv  # similar blood pools
    bright_background = (image > lv * 0.8) & (label == 0)
    assert bright_background.sum() > 0.5 * (label == 3).sum()  # fat / aorta as bright as blood
    assert myo < lv


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture):
    main(["--out", str(tmp_path / "cli"), "--num-patients", "1", "--seed", "3", "--image-size", "64", "64"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "cli")
    (item, _) = read_acdc(tmp_path / "cli")
    assert load(item["image"]).shape[:2] == (64, 64)


def test_invalid_arguments(tmp_path: Path):
    with pytest.raises(ValueError, match="num_patients"):
        generate_acdc_phantom(tmp_path, num_patients=0)
    with pytest.raises(ValueError, match="image_size"):
        generate_acdc_phantom(tmp_path, image_size=(16, 16))
