"""
Tests of gcl_monai.transforms.BatchSliceAugmentation: the fine-tuning augmentation of a whole batch at once against
the per-slice MONAI transforms it reproduces (their own objects, their random draws set by hand to the batch's
parameters), and the distributions of its draws against the transforms' ranges and their own draws.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.transforms import (
    Compose,
    EnsureTyped,
    RandAdjustContrastd,
    RandAffined,
    RandFlipd,
    RandGaussianSmoothd,
    RandScaleIntensityd,
    RandStdShiftIntensityd,
)
from scipy import stats
from torch.utils._python_dispatch import TorchDispatchMode

from gcl_monai.transforms import BatchSliceAugmentation, RandRelativeGaussianNoised, finetune_transforms

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
#: the per-slice and the batched sampling positions differ by float rounding (images in [0, 1]; 3.4e-6 at most seen)
IMAGE_ATOL = 2e-5


def _batch(num: int = 6, size: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    """Smooth random images in [0, 1] (not symmetric) and labels 0..3 in off-centre blocks."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num, 1, size // 4, size // 4, generator=g)
    image = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    image = image + 0.1 * torch.rand(num, 1, size, size, generator=g)
    label = torch.zeros(num, 1, size, size)
    label[:, :, 3:10, 4:15], label[:, :, 10:19, 5:9], label[:, :, 12:20, 12:22] = 1, 2, 3
    return {"image": image, "label": label}


class _Normals:
    """Stands in for RandRelativeGaussianNoised's NumPy state: its standard normal draw is the given field."""

    def __init__(self, field: np.ndarray) -> None:
        self.field = field

    def standard_normal(self, size):
        assert tuple(size) == self.field.shape
        return self.field


def _setter(obj, **values):
    """A ``randomize`` that sets ``values`` on ``obj`` instead of drawing them."""

    def randomize(*_args, **_kwargs):
        for name, value in values.items():
            setattr(obj, name, value)

    return randomize


def _per_slice(transform: Compose, params: list[dict], batch: dict, i: int) -> dict:
    """
    The per-slice transform itself (a copy) on slice ``i`` of ``batch``, its random draws replaced by slice ``i``'s
    parameters of the batched form (``params``, one dictionary per step of the list).
    """
    t = copy.deepcopy(transform)
    for step, p in zip(t.transforms, params):
        do = bool(p["do"][i]) if "do" in p else None
        if isinstance(step, RandFlipd):
            step.randomize = _setter(step, _do_transform=do)
        elif isinstance(step, RandAffined):
            step.randomize = _setter(step, _do_transform=do)
            grid = step.rand_affine.rand_affine_grid
            grid.randomize = _setter(
                grid,
                rotate_params=[float(p["rotate"][i])] if "rotate" in p else [],
                shear_params=[],
                translate_params=p["translate"][i].tolist() if "translate" in p else [],
                scale_params=p["scale"][i].tolist() if "scale" in p else [],
            )
        elif isinstance(step, RandAdjustContrastd):
            step.randomize = _setter(step, _do_transform=do)
            step.adjuster.randomize = _setter(step.adjuster, _do_transform=True, gamma_value=float(p["gamma"][i]))
        elif isinstance(step, RandScaleIntensityd):
            step.randomize = _setter(step, _do_transform=do)
            step.scaler.randomize = _setter(step.scaler, _do_transform=True, factor=float(p["factor"][i]))
        elif isinstance(step, RandStdShiftIntensityd):
            step.randomize = _setter(step, _do_transform=do)
            step.shifter.randomize = _setter(step.shifter, _do_transform=True, factor=float(p["factor"][i]))
        elif isinstance(step, RandRelativeGaussianNoised):
            step.randomize = _setter(step, _do_transform=do, _fraction=float(p["fraction"][i]))
            step.R = _Normals(p["field"]["image"][i].numpy())
        else:
            assert isinstance(step, EnsureTyped)
    return t({key: value[i].clone() for key, value in batch.items()})


def _hand_set(aug: BatchSliceAugmentation, batch: dict, cases: list[dict]) -> list[dict]:
    """Parameters of the batched form for each slice, drawn and then overwritten by ``cases`` (one per slice)."""
    params = aug.randomize(batch)
    names = [type(step).__name__ for step in aug.steps]
    for i, case in enumerate(cases):
        for name_and_field, value in case.items():
            index, field = name_and_field
            if field == "do":
                params[index]["do"][i] = bool(value)
            else:
                params[index][field][i] = torch.as_tensor(value, dtype=torch.float32)
    assert names == ["_Flip", "_Flip", "_Affine", "_Contrast", "_Scale", "_StdShift", "_Noise", "_NoOp"]
    return params


def _nothing(n_steps: int = 7) -> dict:
    return {(step, "do"): False for step in range(n_steps)}


#: (step index, field) of finetune_transforms' list: 0, 1 flips; 2 affine; 3 contrast; 4 scale; 5 shift; 6 noise
CASES = {
    "identity": _nothing(),
    "flip rows": {**_nothing(), (0, "do"): True},
    "flip both": {**_nothing(), (0, "do"): True, (1, "do"): True},
    "rotate 90": {**_nothing(), (2, "do"): True, (2, "rotate"): math.pi / 2, (2, "scale"): [1.0, 1.0]},
    "rotate -90, flip columns": {
        **_nothing(),
        (1, "do"): True,
        (2, "do"): True,
        (2, "rotate"): -math.pi / 2,
        (2, "scale"): [1.0, 1.0],
    },
    "intensities": {
        (0, "do"): False,
        (1, "do"): False,
        (2, "do"): False,
        (3, "do"): True,
        (3, "gamma"): 1.2,
        (4, "do"): True,
        (4, "factor"): -0.08,
        (5, "do"): True,
        (5, "factor"): 0.07,
        (6, "do"): True,
        (6, "fraction"): 0.04,
    },
}
#: the cases whose sampling positions are pixel centres: the labels are equal, not only within rounding
EXACT = ("identity", "flip rows", "flip both", "rotate 90", "rotate -90, flip columns", "intensities")


@pytest.mark.parametrize("case", list(CASES))
def test_hand_set_parameters_give_the_per_slice_transforms_output(case):
    """
    For the same parameters (hand-set: identity, flips, +-90 degrees, the intensities), every slice of the batch
    equals the per-slice MONAI transforms' output: the image within IMAGE_ATOL (the labels exactly).
    """
    transform = finetune_transforms(image_size=24, affine_prob=1.0, intensity_prob=1.0)
    aug = BatchSliceAugmentation(transform)
    batch = _batch(num=3)
    params = _hand_set(aug, batch, [CASES[case]] * 3)
    ours = aug.apply(batch, params)
    for i in range(3):
        theirs = _per_slice(transform, params, batch, i)
        torch.testing.assert_close(ours["image"][i], theirs["image"], atol=IMAGE_ATOL, rtol=0)
        assert torch.equal(ours["label"][i], theirs["label"])
        assert ours["label"].dtype == theirs["label"].dtype == torch.float32
    if case == "identity":
        assert torch.equal(ours["image"], batch["image"]) and torch.equal(ours["label"], batch["label"])
    else:
        assert not torch.equal(ours["image"], batch["image"])


def test_a_90_degree_rotation_is_a_quarter_turn_of_the_pixels():
    """Independent of MONAI: at +90 degrees (MONAI's sense) output pixel (r, c) is input pixel (n - 1 - c, r)."""
    transform = finetune_transforms(image_size=24, affine_prob=1.0)
    aug = BatchSliceAugmentation(transform)
    batch = _batch(num=2)
    params = _hand_set(aug, batch, [CASES["rotate 90"]] * 2)
    ours = aug.apply(batch, params)
    torch.testing.assert_close(ours["image"], batch["image"].rot90(-1, dims=(2, 3)), atol=IMAGE_ATOL, rtol=0)
    assert torch.equal(ours["label"], batch["label"].rot90(-1, dims=(2, 3)))


def test_drawn_parameters_give_the_per_slice_transforms_output():
    """
    Every step drawn at random (probabilities 1 for the affine and the intensities, so they act), the per-slice
    transforms given the same parameters: images within IMAGE_ATOL; labels equal but where a source position falls
    within rounding of a pixel boundary (at most 0.5% of the pixels, always a neighbour's value).
    """
    transform = finetune_transforms(
        image_size=24, affine_prob=1.0, intensity_prob=1.0, rotate_degrees=30, scale_range=0.2
    )
    aug = BatchSliceAugmentation(transform, seed=3)
    batch = _batch(num=12)
    params = aug.randomize(batch)
    assert bool(params[2]["do"].all()) and params[2]["rotate"].abs().min() > 0
    ours = aug.apply(batch, params)
    differ = 0
    for i in range(12):
        theirs = _per_slice(transform, params, batch, i)
        torch.testing.assert_close(ours["image"][i], theirs["image"], atol=IMAGE_ATOL, rtol=0)
        differ += int((ours["label"][i] != theirs["label"]).sum())
    assert differ <= 0.005 * batch["label"].numel()
    assert set(ours["label"].unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_a_shift_and_a_new_size_are_resampled_as_rand_affined_does():
    """``translate_range`` and a ``spatial_size`` other than the slice's (the normalisation of both grids)."""
    transform = Compose(
        [
            RandFlipd(keys=("image", "label"), prob=1.0, spatial_axis=1),
            RandAffined(
                keys=("image", "label"),
                prob=1.0,
                spatial_size=(20, 30),
                rotate_range=0.4,
                translate_range=(3, 2),
                scale_range=(0.1, 0.2),
                mode=("bilinear", "nearest"),
                padding_mode="zeros",
            ),
        ]
    )
    aug = BatchSliceAugmentation(transform, seed=1)
    batch = _batch(num=4)
    params = aug.randomize(batch)
    ours = aug.apply(batch, params)
    assert ours["image"].shape == (4, 1, 20, 30)
    for i in range(4):
        t = copy.deepcopy(transform)
        t.transforms[0].randomize = _setter(t.transforms[0], _do_transform=bool(params[0]["do"][i]))
        t.transforms[1].randomize = _setter(t.transforms[1], _do_transform=True)
        grid = t.transforms[1].rand_affine.rand_affine_grid
        grid.randomize = _setter(
            grid,
            rotate_params=[float(params[1]["rotate"][i])],
            shear_params=[],
            translate_params=params[1]["translate"][i].tolist(),
            scale_params=params[1]["scale"][i].tolist(),
        )
        theirs = t({key: value[i].clone() for key, value in batch.items()})
        torch.testing.assert_close(ours["image"][i], theirs["image"], atol=IMAGE_ATOL, rtol=0)
        assert (ours["label"][i] != theirs["label"]).float().mean() <= 0.01


N_DRAWS = 20_000


def _moments_match(values: np.ndarray, low: float, high: float) -> None:
    """Mean and variance of ``U(low, high)`` within 5 standard errors, and the range covered and respected."""
    mean, var = (low + high) / 2, (high - low) ** 2 / 12
    n = len(values)
    assert abs(values.mean() - mean) < 5 * math.sqrt(var / n)
    # the variance of a uniform sample's variance: (mu4 - var^2) / n with mu4 = 9/5 var^2
    assert abs(values.var() - var) < 5 * math.sqrt(0.8 * var**2 / n)
    assert low <= values.min() and values.max() <= high
    assert values.min() < low + 0.01 * (high - low) and values.max() > high - 0.01 * (high - low)


def _rate_matches(mask: torch.Tensor, prob: float) -> None:
    n = mask.numel()
    assert abs(mask.float().mean().item() - prob) < 5 * math.sqrt(prob * (1 - prob) / n)


def test_drawn_parameters_follow_the_transforms_ranges_and_probabilities():
    """
    Over many slices the draws have the distributions of the per-slice transforms' parameters, from the values
    given to ``finetune_transforms`` (degrees turned to radians, scale ``1 +- scale_range``, ...): probabilities
    within 5 binomial standard deviations, mean and variance of each uniform within 5 standard errors.
    """
    transform = finetune_transforms(
        image_size=4, flip_prob=0.4, rotate_degrees=30, scale_range=0.2, affine_prob=0.8, intensity_prob=0.3
    )
    aug = BatchSliceAugmentation(transform, seed=0)
    params = aug.randomize({"image": torch.zeros(N_DRAWS, 1, 4, 4), "label": torch.zeros(N_DRAWS, 1, 4, 4)})
    _rate_matches(params[0]["do"], 0.4)
    _rate_matches(params[1]["do"], 0.4)
    _rate_matches(params[2]["do"], 0.8)
    for step in range(3, 7):
        _rate_matches(params[step]["do"], 0.3)
    # the draws of different steps are independent
    assert abs(np.corrcoef(params[0]["do"].float().numpy(), params[1]["do"].float().numpy())[0, 1]) < 0.05
    _moments_match(params[2]["rotate"].numpy(), -math.radians(30), math.radians(30))
    for axis in range(2):
        _moments_match(params[2]["scale"][:, axis].numpy(), 0.8, 1.2)
    assert abs(np.corrcoef(params[2]["scale"].T.numpy())[0, 1]) < 0.05  # the two scales drawn independently
    _moments_match(params[3]["gamma"].numpy(), 0.8, 1.25)
    _moments_match(params[4]["factor"].numpy(), -0.1, 0.1)
    _moments_match(params[5]["factor"].numpy(), -0.1, 0.1)
    _moments_match(params[6]["fraction"].numpy(), 0.0, 0.05)
    field = params[6]["field"]["image"]
    assert field.shape == (N_DRAWS, 1, 4, 4)
    assert abs(field.mean().item()) < 5 / math.sqrt(field.numel()) and abs(field.std().item() - 1) < 0.01


def test_drawn_parameters_have_the_distribution_of_monais_own_draws():
    """Two-sample Kolmogorov-Smirnov tests against the per-slice transforms' own random draws (their NumPy states)."""
    transform = finetune_transforms(image_size=4, rotate_degrees=30, scale_range=0.2, seed=0)
    affine, contrast = transform.transforms[2], transform.transforms[3]
    grid = affine.rand_affine.rand_affine_grid
    theirs_angle, theirs_scale, theirs_gamma = [], [], []
    for _ in range(4000):
        grid.randomize()
        theirs_angle.append(grid.rotate_params[0])
        theirs_scale.append(grid.scale_params[1])
        contrast.adjuster.randomize()
        theirs_gamma.append(contrast.adjuster.gamma_value)
    params = BatchSliceAugmentation(transform, seed=0).randomize({"image": torch.zeros(4000, 1, 4, 4)})
    for ours, theirs in [
        (params[2]["rotate"], theirs_angle),
        (params[2]["scale"][:, 1], theirs_scale),
        (params[3]["gamma"], theirs_gamma),
    ]:
        assert stats.ks_2samp(ours.numpy(), np.asarray(theirs)).pvalue > 1e-4


@pytest.mark.parametrize("bundle", ["gcl_acdc", "gcl_prostate", "gcl_mmwhs", "gcl_dicom", "gcl_demo"])
def test_the_bundles_transform_list_is_reproduced(bundle):
    """
    Each bundle's ``batched_augmentation`` gives ``DeviceSliceBatches`` the batched form of its own
    ``train#preprocessing`` (the listed transforms of train.json), with its values.
    """
    parser = ConfigParser()
    parser.read_config(str(ROOT / "bundles" / bundle / "configs" / "train.json"))
    parser.update({"data_on_device": True, "batched_augmentation": True, "device": "$torch.device('cpu')"})
    aug = parser.get_parsed_content("train#device_dataloader#augmentation")
    assert isinstance(aug, BatchSliceAugmentation)
    assert [type(s).__name__ for s in aug.steps] == [
        "_Flip",
        "_Flip",
        "_Affine",
        "_Contrast",
        "_Scale",
        "_StdShift",
        "_Noise",
        "_NoOp",
    ]
    affine = aug.steps[2]
    rotate = math.radians(parser.get_parsed_content("rotate_degrees"))
    assert affine.prob == parser.get_parsed_content("affine_prob")
    assert affine.rotate == [(-rotate, rotate)]
    scale = parser.get_parsed_content("scale_range")
    assert affine.scale == [(-scale, scale)] * 2
    assert affine.modes == {"image": "bilinear", "label": "nearest"}


@pytest.mark.parametrize(
    ("step", "named"),
    [
        (RandGaussianSmoothd(keys="image", prob=0.5), "RandGaussianSmoothd"),
        (RandAffined(keys="image", prob=0.5, shear_range=0.1), "shear_range"),
        (RandStdShiftIntensityd(keys="image", factors=0.1, nonzero=True), "nonzero"),
        (RandAdjustContrastd(keys="image", retain_stats=True), "retain_stats"),
        (EnsureTyped(keys="image", dtype=torch.float16), "EnsureTyped"),
    ],
)
def test_a_transform_it_cannot_reproduce_is_refused_by_name(step, named):
    with pytest.raises(ValueError, match=named):
        BatchSliceAugmentation(Compose([RandFlipd(keys="image", prob=0.5), step]))


def test_a_missing_key_raises_unless_allowed():
    aug = BatchSliceAugmentation(finetune_transforms(image_size=8))
    with pytest.raises(KeyError, match="label"):
        aug({"image": torch.rand(2, 1, 8, 8)})
    image_only = BatchSliceAugmentation(finetune_transforms(image_size=8, with_label=False))
    assert set(image_only({"image": torch.rand(2, 1, 8, 8)})) == {"image"}


class _HostReads(TorchDispatchMode):
    """Counts the ATen operations and the reads of a tensor's value by the host."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.reads += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def test_the_batch_is_augmented_without_host_reads_or_host_tensors():
    """
    On the meta device (no values at all: reading one, or mixing in a tensor made on the host, fails) the batched
    augmentation runs, with no read of a value and a few dozen operations per batch whatever its size.
    """
    aug = BatchSliceAugmentation(finetune_transforms(image_size=16, affine_prob=1.0, intensity_prob=1.0))
    counts = []
    for num in (2, 8):
        batch = {key: value.to("meta") for key, value in _batch(num=num, size=16).items()}
        counter = _HostReads()
        with counter:
            out = aug(batch)
        assert out["image"].device.type == "meta" and out["image"].shape == (num, 1, 16, 16)
        assert counter.reads == 0
        counts.append(counter.ops)
    assert counts[0] == counts[1] < 200


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_augmentation_never_synchronises_and_matches_the_cpu():
    """On a GPU: no host synchronisation (torch's sync debug mode raises on one); the CPU's output for the same
    parameters."""
    aug = BatchSliceAugmentation(finetune_transforms(image_size=24, affine_prob=1.0, intensity_prob=1.0), seed=0)
    batch = {key: value.cuda() for key, value in _batch(num=8).items()}
    aug(batch)  # the first call builds the resamplers and the generator
    torch.cuda.set_sync_debug_mode("error")
    try:
        params = aug.randomize(batch)
        ours = aug.apply(batch, params)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    cpu_params = [
        {k: ({f: v.cpu() for f, v in x.items()} if isinstance(x, dict) else x.cpu()) for k, x in p.items()}
        for p in params
    ]
    theirs = aug.apply({key: value.cpu() for key, value in batch.items()}, cpu_params)
    torch.testing.assert_close(ours["image"].cpu(), theirs["image"], atol=IMAGE_ATOL, rtol=0)
    assert (ours["label"].cpu() != theirs["label"]).float().mean() <= 0.005
