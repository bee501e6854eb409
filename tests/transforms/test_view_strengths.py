"""ViewStrengths: one definition of the view augmentation for the per-slice and the per-batch pipelines."""

import dataclasses

import pytest

from gcl_monai.transforms import BatchContrastiveViews, ContrastiveViewsd, ViewStrengths


def test_both_pipelines_read_the_same_strengths():
    custom = {"rotate_degrees": 30, "blur_sigma": [0.5, 2], "crop_scale": (0.6, 0.9), "noise_prob": 0}
    per_slice = ContrastiveViewsd(spatial_size=16, seed=0, **custom).strengths
    per_batch = BatchContrastiveViews(spatial_size=16, seed=0, **custom).strengths
    assert per_slice == per_batch == ViewStrengths(**custom)
    # normalised types: ranges become float tuples, scalars floats
    assert per_batch.blur_sigma == (0.5, 2.0) and per_batch.rotate_degrees == 30.0 and per_batch.noise_prob == 0.0
    # the untouched fields keep the shared defaults
    assert per_batch.gamma == ViewStrengths().gamma == (0.7, 1.5)
    # the batch pipeline's blur kernel covers 4 sigma of the largest blur
    assert BatchContrastiveViews(blur_sigma=(0.5, 2.0)).blur_radius == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        per_batch.flip_prob = 1.0


def test_the_per_slice_views_are_built_from_the_strengths():
    views = ContrastiveViewsd(spatial_size=16, seed=0, rotate_degrees=30, flip_prob=0.25, blur_prob=0.0)
    steps = {type(t).__name__: t for t in views.views[0].transforms}
    assert steps["RandRotated"].rand_rotate.range_x == pytest.approx((-0.5235988, 0.5235988))
    assert steps["RandFlipd"].prob == 0.25
    assert steps["RandGaussianSmoothd"].prob == 0.0


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"crop_scale": (0.0, 1.0)}, "crop_scale"),
        ({"crop_scale": (0.8, 0.5)}, "crop_scale"),
        ({"flip_prob": 1.5}, "flip_prob is a probability"),
        ({"noise_std_fraction": -0.1}, "noise_std_fraction"),
        ({"rotate_degrees": float("nan")}, "rotate_degrees"),
        ({"gamma": (0.0, 1.5)}, "gamma must be positive"),
        ({"blur_sigma": (1.0, 0.5)}, "blur_sigma"),
        ({"gamma": (0.5, 1.0, 2.0)}, "gamma"),
    ],
)
def test_invalid_strengths_are_named(bad, match):
    for build in (ViewStrengths, ContrastiveViewsd, BatchContrastiveViews):
        with pytest.raises(ValueError, match=match):
            build(**bad)


def test_an_unknown_strength_is_refused():
    for build in (ContrastiveViewsd, BatchContrastiveViews):
        with pytest.raises(TypeError, match="rotate_degres"):
            build(rotate_degres=30)
