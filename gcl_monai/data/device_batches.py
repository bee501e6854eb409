"""Training batches drawn from slices kept as tensors on the training device, augmented there."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from monai.data import get_track_meta, set_track_meta
from monai.transforms import apply_transform
from monai.utils import convert_to_tensor

from gcl_monai.data.slice_dataset import SliceDataset

__all__ = ["DeviceSliceBatches"]


class DeviceSliceBatches:
    """
    The batches that ``monai.data.DataLoader(dataset, batch_size, sampler=RandomSampler(dataset, replacement=True,
    num_samples=num_batches * batch_size))`` gives, drawn on ``device`` without loader workers: the dataset's cached
    (un-augmented) slices are stacked once into one tensor per key on ``device``; every batch draws ``batch_size``
    slice indices uniformly with replacement (``torch.randint`` on the device, from torch's default generator of the
    device, which ``monai.utils.set_determinism`` seeds) and applies the dataset's own per-slice random transform
    to each drawn slice there (e.g. :func:`gcl_monai.transforms.finetune_transforms` with ``device``: MONAI's
    transforms run on tensors of any device). The transform, and so the augmentation distribution, is the loader's;
    only the stream of random numbers differs.

    Per batch, nothing is copied between the host and the device by this class (the transforms' random parameters
    are drawn on the host by their NumPy random states, as in a loader worker; a few of MONAI's transforms copy a
    small tensor of them to the device). The transform runs without MONAI's metadata tracking (``set_track_meta(False)``
    for the batch's duration): the batch's values are the same, a training batch needs no metadata
    (``finetune_transforms`` drops it at its end), and that bookkeeping, not the arithmetic, is most of the host's time
    per slice (``benchmarks/bench_finetune_data.py``). ``num_workers`` is 0, so that
    :py:class:`gcl_monai.handlers.EpochSeedHandler` re-seeds the dataset's transform at every epoch (``set_rnd``).

    **Batched augmentation** (``augmentation``, the departure from the loader's path, off by default): a callable
    that augments the whole batch ``{key: (N, C, H, W)}`` at once replaces the per-slice loop, e.g.
    :class:`gcl_monai.transforms.BatchSliceAugmentation` of ``dataset.transform`` (the bundles'
    ``batched_augmentation``, on in ``gpu-run``): the same transforms and the same distribution of their random
    parameters, drawn as tensors on the device by torch's generator (seeded by ``set_determinism``, so by
    ``EpochSeedHandler`` at every epoch) instead of each transform's NumPy state, and applied with a few batched
    operations instead of a few hundred per slice, with no host read of a device value and no copy to the device.
    It must be built from the dataset's own transform (this class does not check it); the dataset's transform is
    then not called.

    Args:
        dataset: the slices (:py:attr:`SliceDataset.data` after its ``volume_transform``) and the per-slice random
            transform (``dataset.transform``; None: no augmentation).
        batch_size: slices per batch.
        num_batches: batches per pass (``len()``; the trainer's epoch length).
        device: where the slices are kept and augmented.
        keys: the keys of the slices that make a batch (the others, e.g. meta labels, are not kept).
        augmentation: None (default): the dataset's per-slice transform on each drawn slice; else the batched form
            of that transform, called on the drawn batch (see above).
    """

    num_workers = 0

    def __init__(
        self,
        dataset: SliceDataset,
        batch_size: int,
        num_batches: int,
        device: str | torch.device = "cpu",
        keys: Sequence[str] = ("image", "label"),
        augmentation: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
    ) -> None:
        if len(dataset) == 0:
            raise ValueError("DeviceSliceBatches needs at least one slice.")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.num_batches = int(num_batches)
        self.device = torch.device(device)
        self.keys = tuple(keys)
        self.augmentation = augmentation
        self.tensors = {
            key: torch.stack([convert_to_tensor(item[key], track_meta=False) for item in dataset.data]).to(self.device)
            for key in self.keys
        }

    def __len__(self) -> int:
        return self.num_batches

    def batch(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """
        The batch of the slices ``index`` (on the device), each transformed by the dataset's transform (or the
        batch by ``augmentation``, when given).

        Returns:
            ``{key: (len(index), C, H, W)}`` on the device.
        """
        drawn = {key: values[index] for key, values in self.tensors.items()}
        if self.augmentation is not None:
            augmented = self.augmentation(drawn)
            return {key: augmented[key] for key in self.keys}
        if self.dataset.transform is None:
            return drawn
        tracking = get_track_meta()
        set_track_meta(False)
        try:
            items = [
                apply_transform(self.dataset.transform, {key: drawn[key][i] for key in self.keys})
                for i in range(len(index))
            ]
        finally:
            set_track_meta(tracking)
        return {
            key: torch.stack([convert_to_tensor(item[key], track_meta=False) for item in items]) for key in self.keys
        }

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for _ in range(self.num_batches):
            yield self.batch(torch.randint(len(self.dataset), (self.batch_size,), device=self.device))
