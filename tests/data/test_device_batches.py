"""Tests of gcl_monai.data.DeviceSliceBatches: the fine-tuning loader's batches, drawn from slices kept on a device."""

from __future__ import annotations

import copy

import h5py
import numpy as np
import pytest
import torch
from monai.data import DataLoader, list_data_collate
from monai.data.utils import set_rnd
from monai.transforms import Compose, RandGaussianSmoothd
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import RandomSampler

from gcl_monai.data import DeviceSliceBatches
from gcl_monai.data.slice_dataset import SliceDataset
from gcl_monai.transforms import BatchSliceAugmentation, finetune_transforms, volume_transforms

SIZE = 16


def _dataset(tmp_path, transform) -> SliceDataset:
    """16 slices of three ACDC-like volumes: random images, labels 0..3 in blocks."""
    rng = np.random.default_rng(0)
    items = []
    for index, depth in enumerate((4, 5, 7)):
        label = np.zeros((depth, 20, 18), np.uint8)
        label[:, 5:10, 4:9], label[:, 10:15, 4:9], label[:, 5:15, 9:14] = 1, 2, 3
        path = tmp_path / f"patient{index + 1:03d}_frame01.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("image", data=rng.random((depth, 20, 18), dtype=np.float32))
            f.create_dataset("label", data=label)
        items.append({"image": f"{path}#image", "label": f"{path}#label", "patient": f"patient{index + 1:03d}"})
    return SliceDataset(items, volume_transforms(image_size=SIZE, meta_keys=[]), transform=transform)


def _loader_batch(dataset: SliceDataset, index: torch.Tensor) -> dict:
    """What the loader path gives for the slices ``index`` (a copy of each cached slice, transformed, collated)."""
    return list_data_collate([dataset[i] for i in index.tolist()])


def test_without_augmentation_a_batch_is_the_loaders_batch_of_the_same_slices(tmp_path):
    dataset = _dataset(tmp_path, transform=None)
    batches = DeviceSliceBatches(dataset, batch_size=5, num_batches=3)
    index = torch.tensor([0, 7, 7, 15, 3])
    ours, theirs = batches.batch(index), _loader_batch(dataset, index)
    assert set(ours) == {"image", "label"}
    for key in ours:
        assert ours[key].shape == (5, 1, SIZE, SIZE)
        assert torch.equal(ours[key], torch.as_tensor(theirs[key]))
    assert len(batches) == 3 and len(list(batches)) == 3


def test_augmentation_is_the_datasets_transform_on_each_drawn_slice(tmp_path):
    """Seeded alike, the device batch equals the loader path's transform of the same slices, slice by slice."""
    dataset = _dataset(tmp_path, transform=finetune_transforms(image_size=SIZE, affine_prob=1.0, intensity_prob=1.0))
    batches = DeviceSliceBatches(dataset, batch_size=4, num_batches=1, device="cpu")
    index = torch.tensor([1, 1, 9, 14])
    set_rnd(dataset, 3)
    ours = batches.batch(index)
    set_rnd(dataset, 3)
    theirs = _loader_batch(dataset, index)
    for key in ("image", "label"):
        torch.testing.assert_close(ours[key], torch.as_tensor(theirs[key]))
    # the augmentation acted: the two copies of slice 1 differ, and differ from the cached slice
    assert not torch.equal(ours["image"][0], ours["image"][1])
    assert not torch.equal(ours["image"][0], batches.tensors["image"][1])
    # nearest interpolation keeps the label values
    assert set(ours["label"].unique().tolist()) <= set(batches.tensors["label"].unique().tolist())
    assert ours["label"].unique().numel() > 1
    # the cache is never modified by the transforms
    assert torch.equal(batches.tensors["image"][1], torch.as_tensor(dataset.data[1]["image"]))


def test_slices_are_drawn_uniformly_with_replacement_like_the_loaders_sampler(tmp_path):
    """Over many batches every slice is drawn about equally often, as by ``RandomSampler(replacement=True)``."""
    dataset = _dataset(tmp_path, transform=None)
    n = len(dataset)
    batches = DeviceSliceBatches(dataset, batch_size=8, num_batches=400)
    torch.manual_seed(0)
    lookup = {tuple(image.flatten().tolist()): i for i, image in enumerate(batches.tensors["image"])}
    counts = np.zeros(n)
    repeats_within_a_batch = 0
    for batch in batches:
        drawn = [lookup[tuple(image.flatten().tolist())] for image in batch["image"]]
        counts += np.bincount(drawn, minlength=n)
        repeats_within_a_batch += len(drawn) != len(set(drawn))
    sampler = RandomSampler(dataset, replacement=True, num_samples=400 * 8, generator=torch.Generator().manual_seed(0))
    reference = np.bincount(list(sampler), minlength=n)
    expected = 400 * 8 / n
    # both within 5 binomial standard deviations of the uniform count
    tolerance = 5 * np.sqrt(expected * (1 - 1 / n))
    assert np.abs(counts - expected).max() < tolerance and np.abs(reference - expected).max() < tolerance
    assert repeats_within_a_batch > 0  # with replacement


def test_the_loader_and_the_device_batches_give_the_same_shapes_and_dtypes(tmp_path):
    dataset = _dataset(tmp_path, transform=finetune_transforms(image_size=SIZE))
    loader_batch = next(iter(DataLoader(dataset, batch_size=5, shuffle=True)))
    device_batch = next(iter(DeviceSliceBatches(dataset, batch_size=5, num_batches=1)))
    for key in ("image", "label"):
        assert device_batch[key].shape == loader_batch[key].shape
        assert device_batch[key].dtype == loader_batch[key].dtype
        assert type(device_batch[key]) is torch.Tensor


def test_empty_dataset_is_refused(tmp_path):
    dataset = _dataset(tmp_path, transform=None)
    empty = copy.copy(dataset)
    empty.data = []
    with pytest.raises(ValueError, match="at least one slice"):
        DeviceSliceBatches(empty, batch_size=2, num_batches=1)


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_batched_augmentation_augments_the_whole_batch_at_once(tmp_path):
    """
    ``augmentation=BatchSliceAugmentation(dataset.transform)``: the loader's shapes, dtypes and label values, the
    slices augmented (each its own draw), the cache untouched, the same batches from the same torch seed, and far
    fewer operations per batch than the per-slice transforms (tests/transforms/test_batch_augmentation.py checks its
    output against theirs).
    """
    transform = finetune_transforms(image_size=SIZE, affine_prob=1.0, intensity_prob=1.0)
    dataset = _dataset(tmp_path, transform=transform)
    batched = DeviceSliceBatches(dataset, batch_size=5, num_batches=2, augmentation=BatchSliceAugmentation(transform))
    per_slice = DeviceSliceBatches(dataset, batch_size=5, num_batches=2)
    loader_batch = next(iter(DataLoader(dataset, batch_size=5, shuffle=True)))
    index = torch.tensor([2, 2, 8, 11, 15])
    ours = batched.batch(index)
    assert set(ours) == {"image", "label"}
    for key in ("image", "label"):
        assert ours[key].shape == loader_batch[key].shape and ours[key].dtype == loader_batch[key].dtype
        assert type(ours[key]) is torch.Tensor
    assert not torch.equal(ours["image"][0], ours["image"][1])
    assert not torch.equal(ours["image"][0], batched.tensors["image"][2])
    assert set(ours["label"].unique().tolist()) <= set(batched.tensors["label"].unique().tolist())
    assert torch.equal(batched.tensors["image"][2], torch.as_tensor(dataset.data[2]["image"]))
    torch.manual_seed(7)
    first = list(batched)
    torch.manual_seed(7)
    again = list(batched)
    assert all(torch.equal(a[key], b[key]) for a, b in zip(first, again) for key in ("image", "label"))
    counts = []
    for batches in (batched, per_slice):
        counter = _OpCounter()
        with counter:
            batches.batch(index)
        counts.append(counter.ops)
    assert counts[0] * 3 < counts[1]


def test_a_transform_the_batched_form_cannot_reproduce_is_named(tmp_path):
    with pytest.raises(ValueError, match="RandGaussianSmoothd"):
        BatchSliceAugmentation(Compose([finetune_transforms(image_size=SIZE), RandGaussianSmoothd(keys="image")]))
