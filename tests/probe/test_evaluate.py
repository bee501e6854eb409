"""The probe's evaluation (gcl_monai.probe.evaluate): the summary by hand, the settings refused, and
evaluate_encoder on tiny volumes whose classes are their intensities: every patient scored once by a probe fitted on
others (cross-validation), the same figures twice, or the test patients by one probe fitted on training patients;
the encoder's weights unchanged."""

import math

import pytest
import torch

from gcl_monai.probe import FrozenEncoder, ProbeSettings, ProbeVolume, evaluate_encoder, summarise
from tests.probe.probe_helpers import FEATURES


def test_summary_by_hand():
    nan = math.nan
    scores = [
        {"dice": 0.5, "dice_per_class": [0.4, nan, nan]},
        {"dice": 0.7, "dice_per_class": [0.8, 0.6, nan]},
        {"dice": nan, "dice_per_class": [nan, nan, nan]},  # a volume without foreground: left out of the means
    ]
    got = summarise(scores, ["rv", "myo", "lv"])
    assert got["dice"] == pytest.approx(0.6) and got["num_volumes"] == 3
    assert got["dice_per_class"]["rv"] == pytest.approx(0.6) and got["dice_per_class"]["myo"] == pytest.approx(0.6)
    assert math.isnan(got["dice_per_class"]["lv"])  # absent from every volume


def test_settings_refuse_unknown_batch_norm_statistics():
    with pytest.raises(ValueError, match=r"bn_stats must be one of \('recompute', 'stored'\)"):
        ProbeSettings(bn_stats="running")


def _volumes(patients, seed):
    """Two slices of 16 x 16 per patient: four blocks of classes 0..3, the image the class / 3 with a little noise."""
    g = torch.Generator().manual_seed(seed)
    label = torch.zeros(2, 16, 16, dtype=torch.long)
    label[:, :8, 8:], label[:, 8:, :8], label[:, 8:, 8:] = 1, 2, 3
    volumes = []
    for p in patients:
        shifted = torch.roll(label, shifts=int(torch.randint(0, 4, (1,), generator=g)), dims=2)
        image = shifted[:, None].float() / 3 + 0.02 * torch.randn(2, 1, 16, 16, generator=g)
        volumes.append(ProbeVolume(p, f"{p}.nii.gz", image, shifted))
    return volumes


def test_cross_validation_and_test_mode_on_tiny_volumes():
    torch.manual_seed(0)
    encoder = FrozenEncoder(FEATURES, "batch", (8, 8))
    weights = {k: v.clone() for k, v in encoder.named_parameters()}
    train = _volumes([f"p{i}" for i in range(6)], seed=1)
    # the stored (initial) batch-norm statistics: recomputed on these images of four intensity levels they centre the
    # intensities, and the ReLU clips half of the four full-resolution channels (Dice about 0.45 here)
    settings = ProbeSettings(grid=(8, 8), pixels_per_class=200, fit_patients=2, folds=3, bn_stats="stored", seed=5)
    cv = evaluate_encoder(encoder, train, 4, ["rv", "myo", "lv"], settings=settings)
    assert cv["settings"]["mode"] == "cross-validation" and cv["settings"]["fit_patients"] == 2
    assert len(cv["folds"]) == 3 and cv["num_volumes"] == 6 == len(cv["volumes"])
    scored = [p for fold in cv["folds"] for p in fold["scored_patients"]]
    assert sorted(scored) == [f"p{i}" for i in range(6)]  # every patient scored once
    for fold in cv["folds"]:
        assert len(fold["fit_patients"]) == 2 and not set(fold["fit_patients"]) & set(fold["scored_patients"])
    assert cv["dice"] > 0.8 and set(cv["dice_per_class"]) == {"rv", "myo", "lv"}  # the classes are the intensities
    assert cv["dice"] == pytest.approx(sum(v["dice"] for v in cv["volumes"]) / 6)
    assert all(torch.equal(weights[k], v) for k, v in encoder.named_parameters())
    assert cv["dice"] == evaluate_encoder(encoder, train, 4, ["rv", "myo", "lv"], settings=settings)["dice"]
    settings = ProbeSettings(grid=(8, 8), pixels_per_class=200, fit_patients=2, folds=3, seed=5)  # recomputed
    test = evaluate_encoder(encoder, train, 4, ["rv", "myo", "lv"], _volumes(["t0", "t1"], seed=2), settings)
    (fold,) = test["folds"]
    assert test["settings"]["mode"] == "test" and fold["scored_patients"] == ["t0", "t1"]
    assert len(fold["fit_patients"]) == 2 and set(fold["fit_patients"]) < {f"p{i}" for i in range(6)}
    assert [v["patient"] for v in test["volumes"]] == ["t0", "t1"] and 0 < test["dice"] <= 1
    # the batch-norm statistics re-estimated on the fit patients, the weights unchanged
    assert all(torch.equal(weights[k], v) for k, v in encoder.named_parameters())
    assert float(encoder.levels[0].conv_0.adn.N.running_mean.abs().sum()) > 0
