"""A dataset of cached 2D slices cut once from 3D volumes, with per-slice random transforms."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Hashable, Mapping, Sequence
from copy import deepcopy
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from monai.data import Dataset, PersistentDataset
from monai.data.utils import pickle_hashing
from monai.transforms import Compose, Randomizable, apply_transform
from monai.utils import TraceKeys, optional_import

tqdm, has_tqdm = optional_import("tqdm", name="tqdm")

__all__ = ["SliceDataset", "SliceRecord"]

logger = logging.getLogger(__name__)

MISSING = -1


class SliceRecord(NamedTuple):
    """One row of :attr:`SliceDataset.slice_table`; meta labels absent from the slice are ``-1``."""

    volume_index: int
    slice_index: int
    patient_id: int
    slice_quantile: int
    organ_state: int


def _cache_safe_globals() -> list:
    """Types besides tensors that cached slices hold (numpy meta data, MONAI trace keys), for ``torch.load``."""
    numpy_core = getattr(np, "_core", None) or np.core
    dtype_classes = [type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDGSU"]
    return [np.ndarray, np.dtype, numpy_core.multiarray._reconstruct, TraceKeys, *dtype_classes]


def _transform_hash(transforms: Sequence[Callable]) -> bytes:
    """Hash of the cached transforms' pickled state; by class names when they cannot be pickled (e.g. lambdas)."""
    try:
        return pickle_hashing(transforms)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        logger.warning("SliceDataset: transforms cannot be pickled (%s); cache files keyed by class names only.", error)
        return pickle_hashing([type(t).__qualname__ for t in transforms])


def _int_or_missing(item: Mapping[Hashable, Any], key: str) -> int:
    value = item.get(key)
    return MISSING if value is None else int(value)


class SliceDataset(Dataset):
    """
    2D slices of a list of 3D volumes: slicing is done once and cached, augmentation at every access.

    ``volume_transform`` (deterministic, e.g. :func:`gcl_monai.transforms.volume_transforms`) maps one item of
    the volume datalist to a list of slice dictionaries (it ends with ``VolumeToSlicesd`` and per-slice
    transforms). It runs once per volume when the dataset is built, in ``cache_num_workers`` threads (like
    ``CacheDataset``); the slices of all volumes are flattened, in datalist order, and kept in memory.
    With ``cache_dir`` the per-volume results are also persisted with MONAI's ``PersistentDataset`` (one
    ``.pt`` file per volume, named by the hash of the datalist item and of ``volume_transform``), so a later
    dataset with the same items and an equal transform reads them instead of re-loading the volumes. Cached
    files are loaded with ``torch.load(weights_only=True)``, allowing only the numpy and MONAI types of the
    slices' meta data; a file that cannot be read is recomputed (MONAI warns). The transform hash is that of
    the pickled transforms, parameters and state included (so build a fresh ``volume_transform`` for each
    dataset to reuse a cache); transforms that cannot be pickled (lambdas) are hashed by class name only,
    so clear ``cache_dir`` when changing them.

    ``transform`` (random, e.g. :func:`gcl_monai.transforms.pretrain_transforms`) is applied to a copy of one
    slice at each ``__getitem__``. As a subclass of ``monai.data.Dataset`` its random state is seeded by
    MONAI's ``DataLoader`` (``set_rnd``); after :meth:`set_epoch_seed` it is instead a function of the epoch
    seed and the slice index, in every worker process.

    ``len()`` is the number of slices. :attr:`slice_table` holds one :class:`SliceRecord`
    ``(volume_index, slice_index, patient_id, slice_quantile, organ_state)`` per slice, for samplers
    (e.g. batches with several slices per patient) and logging; :attr:`volume_data` is the volume datalist.

    Example (bundle config)::

        {"_target_": "gcl_monai.data.slice_dataset.SliceDataset", "data": "@train_volumes",
         "volume_transform": {"_target_": "gcl_monai.transforms.volume_transforms", "image_size": [128, 128]},
         "transform": {"_target_": "gcl_monai.transforms.pretrain_transforms", "image_size": [128, 128]},
         "cache_num_workers": 2, "cache_dir": "$@bundle_root + '/cache'"}

    Args:
        data: the volume datalist, one dictionary per 3D volume.
        volume_transform: deterministic callable from a volume item to a list of slice dictionaries.
        transform: random per-slice callable (or sequence of callables), None for none.
        cache_num_workers: threads used to run ``volume_transform`` (0: in the calling thread).
        cache_dir: directory to persist the per-volume slice lists in; None keeps them in memory only.
        progress: show a ``tqdm`` progress bar while caching (when tqdm is installed).
        copy_cache: give ``transform`` a deep copy of the cached slice (default True), so that transforms
            that modify their input in place cannot corrupt the cache.

    Raises:
        TypeError: ``volume_transform`` returned something else than a list of dictionaries.
    """

    def __init__(
        self,
        data: Sequence[Mapping[Hashable, Any]],
        volume_transform: Callable | Sequence[Callable],
        transform: Callable | Sequence[Callable] | None = None,
        cache_num_workers: int = 0,
        cache_dir: str | Path | None = None,
        progress: bool = False,
        copy_cache: bool = True,
    ) -> None:
        volume_transform = volume_transform if isinstance(volume_transform, Compose) else Compose(volume_transform)
        if cache_dir is None:
            volumes: Dataset = Dataset(data, volume_transform)
        else:
            volumes = PersistentDataset(
                data, volume_transform, cache_dir=cache_dir, hash_transform=_transform_hash, track_meta=True
            )
        per_volume = self._slice_volumes(volumes, cache_num_workers, progress)
        slices: list[dict] = []
        table: list[SliceRecord] = []
        for volume_index, items in enumerate(per_volume):
            if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
                raise TypeError(
                    f"volume_transform must return a list of slice dictionaries (end it with VolumeToSlicesd); "
                    f"got {type(items).__name__} for volume {volume_index}: {data[volume_index]}."
                )
            for position, item in enumerate(items):
                slices.append(item)
                slice_index = _int_or_missing(item, "slice_index")
                table.append(
                    SliceRecord(
                        volume_index=volume_index,
                        slice_index=position if slice_index == MISSING else slice_index,
                        patient_id=_int_or_missing(item, "patient_id"),
                        slice_quantile=_int_or_missing(item, "slice_quantile"),
                        organ_state=_int_or_missing(item, "organ_state"),
                    )
                )
        super().__init__(data=slices, transform=transform)
        self.volume_data = data
        self.slice_table = table
        self.copy_cache = copy_cache
        self._epoch_seed = torch.full((1,), -1, dtype=torch.int64).share_memory_()
        self._randomizables: list[Randomizable] | None = None
        logger.info("SliceDataset: %d slices from %d volumes.", len(slices), len(data))

    @staticmethod
    def _slice_volumes(volumes: Dataset, num_workers: int, progress: bool) -> list:
        """Run the volume transform on every volume (through the persistent cache when there is one)."""

        def show(results):
            return tqdm(results, total=len(volumes), desc="Slicing volumes") if progress and has_tqdm else results

        indices = range(len(volumes))
        with torch.serialization.safe_globals(_cache_safe_globals()):
            if num_workers > 0:
                with ThreadPool(num_workers) as pool:
                    return list(show(pool.imap(volumes.__getitem__, indices)))
            return [volumes[i] for i in show(indices)]

    def set_epoch_seed(self, seed: int | None) -> None:
        """
        Make the random transform of every slice a function of ``(seed, index)`` only: before transforming slice
        ``index``, the random state of every randomizable transform in ``transform`` (found through the
        attributes, e.g. the transforms of a ``Compose`` and their inner random transforms) is re-seeded in place
        from ``numpy.random.SeedSequence([seed, index])``, each with its own seed. The seed lives in
        shared memory, so it reaches DataLoader worker processes too, persistent ones included: an epoch then
        draws the same views whatever the number of workers, and a resumed run the same views as an
        uninterrupted one (set by :py:class:`gcl_monai.handlers.EpochSeedHandler` at every epoch). ``None``
        restores the default: one random stream per process, re-seeded by MONAI's ``DataLoader``.

        Raises:
            ValueError: When ``seed`` is negative.
        """
        if seed is not None and seed < 0:
            raise ValueError(f"the epoch seed must be non-negative, got {seed}.")
        self._epoch_seed[0] = -1 if seed is None else int(seed)

    def _transform(self, index: int) -> Any:
        item = deepcopy(self.data[index]) if self.copy_cache else self.data[index]
        seed = int(self._epoch_seed[0])
        if seed >= 0:
            if self._randomizables is None:
                self._randomizables = _randomizables(self.transform)
            item_seeds = np.random.SeedSequence([seed, index]).generate_state(len(self._randomizables))
            for randomizable, item_seed in zip(self._randomizables, item_seeds.tolist()):
                randomizable.R.seed(item_seed)  # in place: much cheaper than set_random_state's new RandomState
        return apply_transform(self.transform, item)


def _randomizables(transform: Any) -> list[Randomizable]:
    """Every ``Randomizable`` reachable from ``transform`` through attributes, lists, tuples and dicts, once each."""
    found: list[Randomizable] = []
    seen: set[int] = set()
    stack = [transform]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            stack.extend(reversed(obj))
        elif isinstance(obj, dict):
            stack.extend(reversed(list(obj.values())))
        elif isinstance(obj, Callable) and hasattr(obj, "__dict__") and not isinstance(obj, type):
            if isinstance(obj, Randomizable):
                found.append(obj)
            stack.extend(reversed(list(vars(obj).values())))
    return found
