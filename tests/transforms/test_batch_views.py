"""BatchContrastiveViews: exact hand-made cases, and the same view statistics as ContrastiveViewsd's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from monai.transforms import GaussianSmooth, Rotate

from gcl_monai.data.phantom import synthesize_patient
from gcl_monai.transforms import BatchContrastiveViews, pretrain_transforms

#: every random step off: the views are the (resized) slices.
OFF = {
    "crop_scale": (1.0, 1.0),
    "flip_prob": 0.0,
    "rotate_prob": 0.0,
    "gamma_prob": 0.0,
    "scale_prob": 0.0,
    "shift_prob": 0.0,
    "noise_prob": 0.0,
    "blur_prob": 0.0,
}
SIZE = 48
VIEW_KEYS = ("image", "image_2")


def smooth_slices(num=3, size=(SIZE, SIZE), dtype=torch.float32, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    noise = torch.rand(num, 1, size[0] // 4, size[1] // 4, generator=generator, dtype=dtype)
    return torch.nn.functional.interpolate(noise, size=size, mode="bicubic", align_corners=False)


# ---------------------------------------------------------------- exact cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_off_gives_the_input_on_its_device_and_dtype(dtype):
    images = smooth_slices(size=(SIZE, SIZE + 8), dtype=dtype)
    views = BatchContrastiveViews(spatial_size=(SIZE, SIZE + 8), **OFF, seed=0)(images)
    assert len(views) == 2
    for view in views:
        assert view.shape == images.shape and view.dtype == dtype and view.device == images.device
        torch.testing.assert_close(view, images, atol=1e-5, rtol=0)


def test_forced_flips_equal_torch_flip():
    images = smooth_slices()
    views = BatchContrastiveViews(spatial_size=SIZE, **{**OFF, "flip_prob": 1.0}, seed=0)
    for view in views(images):  # RandFlipd along both axes
        torch.testing.assert_close(view, torch.flip(images, dims=(2, 3)), atol=1e-5, rtol=0)
    params = views.randomize(images)
    params["flip"] = torch.tensor([[True, False], [False, True], [False, False]])  # (rows, columns)
    out = views.apply(images, params)
    torch.testing.assert_close(out[0], torch.flip(images[0], dims=(1,)), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1], torch.flip(images[1], dims=(2,)), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[2], images[2], atol=1e-5, rtol=0)


def test_rotation_matches_monai_rotate():
    images = smooth_slices(num=2)
    views = BatchContrastiveViews(spatial_size=SIZE, **OFF, seed=0)
    params = views.randomize(images)
    params["angle"] = torch.full((2,), math.pi / 2)
    quarter = views.apply(images, params)  # MONAI's +90 degrees: torch.rot90 from columns to rows
    torch.testing.assert_close(quarter, torch.rot90(images, 1, dims=(3, 2)), atol=1e-5, rtol=0)
    params["angle"] = torch.tensor([0.3, -0.7])
    rotated = views.apply(images, params)
    for view, image, angle in zip(rotated, images, (0.3, -0.7)):
        expected = torch.as_tensor(Rotate(angle, padding_mode="zeros")(image))  # zero corners included
        torch.testing.assert_close(view, expected, atol=1e-5, rtol=0)


def test_crop_box_matches_crop_then_resize():
    images = smooth_slices(num=1)
    views = BatchContrastiveViews(spatial_size=SIZE, **OFF, seed=0)
    params = views.randomize(images)
    params["crop_size"] = torch.tensor([[20.0, 31.0]])
    params["crop_corner"] = torch.tensor([[3.0, 17.0]])
    expected = torch.nn.functional.interpolate(images[..., 3:23, 17:48], size=(SIZE, SIZE), mode="bilinear")
    torch.testing.assert_close(views.apply(images, params), expected, atol=1e-5, rtol=0)


def test_blur_with_a_fixed_sigma_equals_monai_gaussian_smooth():
    images = smooth_slices() + torch.rand(3, 1, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    for sigma in (0.25, 0.8):
        blur = BatchContrastiveViews(spatial_size=SIZE, **{**OFF, "blur_prob": 1.0, "blur_sigma": (sigma, sigma)})
        for view in blur(images):
            for out, image in zip(view, images):
                torch.testing.assert_close(out, torch.as_tensor(GaussianSmooth(sigma)(image)), atol=1e-5, rtol=0)
    # one sigma per axis and per slice, every kernel with the radius of the largest sigma: MONAI's kernels stop
    # at their own 4 sigma, the taps beyond hold < 1e-4 of a kernel's sum (images here are below 2)
    blur = BatchContrastiveViews(spatial_size=SIZE, **{**OFF, "blur_prob": 1.0, "blur_sigma": (0.3, 1.0)}, seed=0)
    params = blur.randomize(images)
    params["blur_sigma"][0] = torch.tensor([0.62, 0.9])  # 0.62: MONAI's shortest kernel for its sigma
    out = blur.apply(images, params)
    for view, image, sigma in zip(out, images, params["blur_sigma"].tolist()):
        torch.testing.assert_close(view, torch.as_tensor(GaussianSmooth(sigma)(image)), atol=5e-4, rtol=0)


def test_same_seed_same_views_and_default_generator():
    images = smooth_slices(num=4)
    views = BatchContrastiveViews(spatial_size=32, seed=3)
    first, second = views(images), views(images)
    same_seed = BatchContrastiveViews(spatial_size=32, seed=3)(images)
    assert all(torch.equal(x, y) and x.shape == (4, 1, 32, 32) for x, y in zip(first, same_seed))
    assert not torch.equal(first[0], second[0])  # the generator moves on
    assert not torch.equal(first[0], first[1])  # two independent views
    views.set_random_state(3)
    assert torch.equal(views(images)[0], first[0])
    torch.manual_seed(5)  # seed=None: torch's default generator, as set_determinism / EpochSeedHandler seed it
    a = BatchContrastiveViews(spatial_size=32)(images)
    torch.manual_seed(5)
    b = BatchContrastiveViews(spatial_size=32)(images)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_invalid_arguments():
    with pytest.raises(ValueError, match="two views"):
        BatchContrastiveViews(num_views=1)
    with pytest.raises(ValueError, match="crop_scale"):
        BatchContrastiveViews(crop_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        BatchContrastiveViews()(torch.zeros(1, 8, 8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_views_on_cuda_without_host_synchronisation():
    images = smooth_slices(num=8).cuda()
    views = BatchContrastiveViews(spatial_size=SIZE, seed=0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = views(images)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(v.device == images.device and v.dtype == images.dtype for v in out)
    flipped = BatchContrastiveViews(spatial_size=SIZE, **{**OFF, "flip_prob": 1.0})(images)
    torch.testing.assert_close(flipped[0], torch.flip(images, dims=(2, 3)), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- same distribution as ContrastiveViewsd

PHANTOM_SIZE = 64
REPEATS = 24  # views of each slice per pipeline
#: the intensity steps off, as ``OFF`` without its geometry.
INTENSITY_OFF = {k: v for k, v in OFF.items() if k not in ("crop_scale", "flip_prob", "rotate_prob")}


def phantom_slices() -> torch.Tensor:
    """16 slices of two synthetic cardiac MRI patients (ED and ES), normalised per volume like the bundles."""
    slices = []
    for i, group in enumerate(("NOR", "DCM")):
        _, frames = synthesize_patient(np.random.default_rng([0, i]), group, (PHANTOM_SIZE, PHANTOM_SIZE))
        for image, _ in frames.values():
            low, high = np.percentile(image, [1, 99])
            image = np.clip((image.astype(np.float32) - low) / (high - low), 0, 1)
            slices += [torch.as_tensor(image[None, ..., k]) for k in range(1, 9, 2)]
    return torch.stack(slices)


def both_pipelines(slices: torch.Tensor, repeats: int = REPEATS, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """``repeats`` views of each slice by ContrastiveViewsd (through ``pretrain_transforms``) and by the batched
    transform, both shaped (slices, repeats, 1, H, W)."""
    per_slice = pretrain_transforms(image_size=PHANTOM_SIZE, seed=0, **kwargs)
    a = torch.stack(
        [
            torch.stack([v for _ in range(repeats // 2) for v in map(per_slice({"image": s}).get, VIEW_KEYS)])
            for s in slices
        ]
    )
    views = BatchContrastiveViews(spatial_size=PHANTOM_SIZE, seed=0, **kwargs)(slices.repeat(repeats // 2, 1, 1, 1))
    b = torch.stack(views).reshape(2, repeats // 2, *slices.shape).permute(2, 0, 1, 3, 4, 5).flatten(1, 2)
    return a, b


def assert_same_distribution(name: str, a: torch.Tensor, b: torch.Tensor, rel: float = 0.0, ks: bool = True):
    """
    Per-view statistics ``(slices, views)`` of the two pipelines: equal means within 4 standard errors (within each
    slice's views, the slices being the same in both) plus ``rel`` of the mean, and, with ``ks``, a two-sample
    Kolmogorov-Smirnov distance below its critical value at 1e-4.
    """
    a, b = a.double(), b.double()
    error = math.sqrt(a.var(dim=1).mean() / a.numel() + b.var(dim=1).mean() / b.numel())
    difference = (a.mean() - b.mean()).abs().item()
    assert difference <= 4 * error + rel * a.mean().abs().item(), (name, a.mean().item(), b.mean().item(), error)
    if ks:
        pooled, order = torch.cat([a.flatten(), b.flatten()]).sort()
        steps = torch.where(order < a.numel(), 1.0 / a.numel(), -1.0 / b.numel())
        distance = steps.cumsum(0)[torch.cat([pooled.diff() != 0, torch.tensor([True])])].abs().max().item()
        critical = math.sqrt(-math.log(1e-4 / 2) / 2) * math.sqrt(2 / a.numel())
        assert distance <= critical, (name, distance, critical)


def mean(x):
    return x.mean(dim=(-3, -2, -1))


def std(x):
    return x.std(dim=(-3, -2, -1))


def zero_fraction(x):
    return (x == 0).double().mean(dim=(-3, -2, -1))


def gradient(x):
    """Mean absolute difference of neighbouring pixels (blur lowers it, noise raises it)."""
    return (x.diff(dim=-1).abs().mean(dim=(-3, -2, -1)) + x.diff(dim=-2).abs().mean(dim=(-3, -2, -1))) / 2


def correlation(views, templates):
    """Pearson correlation of every view (S, R, ...) with every template (S, T, ...) of its slice: (S, R, T)."""
    views, templates = views.flatten(2).double(), templates.flatten(2).double()
    views, templates = views - views.mean(-1, keepdim=True), templates - templates.mean(-1, keepdim=True)
    dots = torch.einsum("srp,stp->srt", views, templates)
    return dots / (views.norm(dim=-1)[..., None] * templates.norm(dim=-1)[:, None] + 1e-12)


@pytest.fixture(scope="module")
def slices():
    return phantom_slices()


def test_crop_statistics_match_contrastive_views(slices):
    """Random resized crop alone: equal to ContrastiveViewsd's view for view (one resampling, no rotation)."""
    a, b = both_pipelines(slices, flip_prob=0.0, rotate_prob=0.0, **INTENSITY_OFF)
    for statistic in (mean, std, zero_fraction, gradient):
        assert_same_distribution(statistic.__name__, statistic(a), statistic(b))


def test_flip_statistics_match_contrastive_views(slices):
    """Flips alone: the flip each view is closest to (none, rows, columns, both) is as frequent in both."""
    a, b = both_pipelines(slices, crop_scale=(1.0, 1.0), rotate_prob=0.0, **INTENSITY_OFF)
    flips = torch.stack([slices, slices.flip(-2), slices.flip(-1), slices.flip(-2, -1)], dim=1)
    closest_a, closest_b = correlation(a, flips).argmax(-1), correlation(b, flips).argmax(-1)
    for k in range(4):
        assert_same_distribution(f"flip {k}", (closest_a == k).double(), (closest_b == k).double(), ks=False)
    assert (closest_a == 0).double().mean() < 0.4  # the test sees flips: a quarter of the views are unflipped


def test_rotation_statistics_match_contrastive_views(slices):
    """Rotation alone: the angle of each view (best match among the slice rotated every 10 degrees), its zero
    (padded) pixels; the single resampling leaves the batched views ~5% sharper (gradient)."""
    a, b = both_pipelines(slices, crop_scale=(1.0, 1.0), flip_prob=0.0, **INTENSITY_OFF)
    degrees = torch.arange(-180, 180, 10)
    rotated = torch.stack(
        [torch.stack([Rotate(math.radians(d), padding_mode="zeros")(s).as_tensor() for d in degrees]) for s in slices]
    )
    angle_a = degrees[correlation(a, rotated).argmax(-1)].abs().double()
    angle_b = degrees[correlation(b, rotated).argmax(-1)].abs().double()
    assert angle_a.max() <= 50 and angle_a.mean() > 5  # rotated, within +-45 degrees
    assert_same_distribution("|angle|", angle_a, angle_b)
    assert_same_distribution("zero_fraction", zero_fraction(a), zero_fraction(b))
    assert_same_distribution("gradient", gradient(a), gradient(b), rel=0.1, ks=False)


def normalised_mean(views, slices):
    """``(mean - min) / (max - min)`` of a view: blind to scaling and shifts, moved by gamma."""
    low, high = views.amin(dim=(-3, -2, -1)), views.amax(dim=(-3, -2, -1))
    return (mean(views) - low) / (high - low)


def relative_scale(views, slices):
    """``std(view) / std(slice)``: ``1 + f`` after RandScaleIntensityd."""
    return std(views) / std(slices)[:, None]


def relative_shift(views, slices):
    """``(mean(view) - mean(slice)) / std(slice)``: ``f`` after RandStdShiftIntensityd."""
    return (mean(views) - mean(slices)[:, None]) / slices.flatten(1).std(dim=1, correction=0)[:, None]


def relative_noise(views, slices):
    """``std(view - slice) / std(slice)``: the noise's fraction of the slice's std."""
    return std(views - slices[:, None]) / std(slices)[:, None]


@pytest.mark.parametrize(
    ("step", "statistic"),
    [("gamma", normalised_mean), ("scale", relative_scale), ("shift", relative_shift), ("noise", relative_noise)],
)
def test_intensity_step_statistics_match_contrastive_views(slices, step, statistic):
    """Each intensity step alone (no geometry): a statistic that recovers its random strength (its distribution, its
    mean change and mean absolute change), and how often the step acts."""
    a, b = both_pipelines(
        slices,
        repeats=4 * REPEATS,
        crop_scale=(1.0, 1.0),
        flip_prob=0.0,
        rotate_prob=0.0,
        **{**INTENSITY_OFF, f"{step}_prob": 0.5},
    )
    # to 1e-4: an unchanged view gives the slice's value up to float rounding
    change_a, change_b = ((statistic(v, slices) - statistic(slices[:, None], slices)).round(decimals=4) for v in (a, b))
    assert_same_distribution(step, change_a, change_b)
    assert_same_distribution(f"|{step}|", change_a.abs(), change_b.abs(), ks=False)
    assert_same_distribution(f"{step} applied", (change_a != 0).double(), (change_b != 0).double(), ks=False)


def test_intensity_statistics_match_contrastive_views(slices):
    """The four intensity steps together, in their order: mean, std, 95th percentile, gradient (noise)."""
    intensity = {**INTENSITY_OFF, "gamma_prob": 0.5, "scale_prob": 0.5, "shift_prob": 0.5, "noise_prob": 0.5}
    a, b = both_pipelines(slices, crop_scale=(1.0, 1.0), flip_prob=0.0, rotate_prob=0.0, **intensity)

    def p95(x):
        return x.flatten(-3).quantile(0.95, dim=-1)

    for statistic in (mean, std, p95, gradient):
        assert_same_distribution(statistic.__name__, statistic(a), statistic(b))


def test_blur_statistics_match_contrastive_views(slices):
    """Blur alone: how much it lowers the gradient, and how often it acts."""
    a, b = both_pipelines(
        slices, crop_scale=(1.0, 1.0), flip_prob=0.0, rotate_prob=0.0, **{**INTENSITY_OFF, "blur_prob": 0.3}
    )
    # to 1e-4: an un-blurred view has a ratio of 1 up to float rounding
    ratio_a, ratio_b = ((gradient(v) / gradient(slices)[:, None]).round(decimals=4) for v in (a, b))
    assert_same_distribution("gradient ratio", ratio_a, ratio_b)
    assert_same_distribution("blurred", (ratio_a < 0.999).double(), (ratio_b < 0.999).double(), ks=False)


def test_default_view_statistics_match_contrastive_views(slices):
    """Every step with the defaults: mean, std, zero fraction, gradient (5% sharper views allowed, see above)."""
    a, b = both_pipelines(slices)
    for statistic in (mean, std, zero_fraction):
        assert_same_distribution(statistic.__name__, statistic(a), statistic(b), ks=False)
    assert_same_distribution("gradient", gradient(a), gradient(b), rel=0.1, ks=False)
