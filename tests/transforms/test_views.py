"""ContrastiveViewsd and RandRelativeGaussianNoised: two different views, reproducible by seed, noise relative to the
image's spread."""

from __future__ import annotations

import pytest
import torch
from monai.data import MetaTensor
from monai.utils import set_determinism

from gcl_monai.transforms import ContrastiveViewsd, RandRelativeGaussianNoised, pretrain_transforms


def slice_image(seed=0) -> MetaTensor:
    generator = torch.Generator().manual_seed(seed)
    return MetaTensor(torch.rand(1, 40, 48, generator=generator) * 0.2)


def test_contrastive_views_shapes_and_difference():
    views = ContrastiveViewsd(spatial_size=(32, 32), seed=0)
    source = slice_image()
    out = views({"image": source, "label": torch.zeros(1, 40, 48)})
    assert out["image"].shape == out["image_2"].shape == (1, 32, 32)
    assert not torch.allclose(out["image"], out["image_2"])
    assert out["label"].shape == (1, 40, 48)  # other keys untouched
    three = ContrastiveViewsd(view_keys=("v1", "v2", "v3"), spatial_size=16, seed=0)({"image": source})
    assert {"image", "v1", "v2", "v3"} <= set(three) and three["v3"].shape == (1, 16, 16)
    with pytest.raises(ValueError, match="two view keys"):
        ContrastiveViewsd(view_keys=("image",))


def test_contrastive_views_reproducible():
    source = slice_image()
    views = ContrastiveViewsd(spatial_size=(32, 32))
    first = [views({"image": source}) for _ in range(3)]
    views.set_random_state(seed=11)
    a = [views({"image": source}) for _ in range(3)]
    views.set_random_state(seed=11)
    b = [views({"image": source}) for _ in range(3)]
    for x, y in zip(a, b):
        assert torch.equal(x["image"], y["image"]) and torch.equal(x["image_2"], y["image_2"])
    assert not all(torch.equal(x["image"], y["image"]) for x, y in zip(first, a))
    try:
        set_determinism(seed=5)
        c = pretrain_transforms(image_size=32)({"image": source})
        set_determinism(seed=5)
        d = pretrain_transforms(image_size=32)({"image": source})
    finally:
        set_determinism(seed=None)
    assert torch.equal(c["image"], d["image"]) and torch.equal(c["image_2"], d["image_2"])
    assert type(c["image"]) is torch.Tensor  # track_meta=False: plain tensors


def test_relative_noise_scales_with_image_std():
    image = slice_image()
    noise = RandRelativeGaussianNoised(keys="image", prob=1.0, std_fraction=0.2)
    noise.set_random_state(seed=3)
    small = noise({"image": image})["image"] - image
    noise.set_random_state(seed=3)
    large = noise({"image": image * 10})["image"] - image * 10
    assert small.abs().max() > 0
    assert torch.allclose(large, small * 10, rtol=1e-3, atol=1e-5)
