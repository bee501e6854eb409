"""Tests of gcl_monai.data.slice_dataset.SliceDataset (tiny synthetic volumes; one real-data test)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.data import DataLoader, MetaTensor
from monai.transforms import Compose, Lambdad, Transform
from monai.utils import set_determinism

from gcl_monai.data.slice_dataset import SliceDataset, SliceRecord
from gcl_monai.transforms import pretrain_transforms, slice_quantiles, volume_transforms

CALLS: list[str] = []


class CountCalls(Transform):
    """Record each volume the volume transform runs on (stateless, so the transform hash is stable)."""

    def __call__(self, data):
        CALLS.append(data["patient"])
        return data


@pytest.fixture(autouse=True)
def reset_calls():
    CALLS.clear()


def counted_volume_transforms(image_size=16) -> Compose:
    return Compose([CountCalls(), volume_transforms(image_size=image_size)])


def make_volumes(tmp_path, depths=(4, 5, 7)) -> list[dict]:
    """ACDC-like h5 files (Z, H, W) of the given depths and in-plane sizes that differ; return the datalist."""
    rng = np.random.default_rng(0)
    items = []
    for index, depth in enumerate(depths):
        height, width = 20 + 4 * index, 18
        label = np.zeros((depth, height, width), np.uint8)
        label[:, 5:10, 4:9], label[:, 10:15, 4:9], label[:, 5:15, 9:14] = 1, 2, 3
        path = tmp_path / f"patient{index + 1:03d}_frame01.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("image", data=rng.random((depth, height, width), dtype=np.float32))
            f.create_dataset("label", data=label)
        items.append(
            {
                "image": f"{path}#image",
                "label": f"{path}#label",
                "patient": f"patient{index + 1:03d}",
                "patient_id": index,
                "organ_state": index % 2,
            }
        )
    return items


def test_length_table_and_single_volume_pass(tmp_path):
    data = make_volumes(tmp_path)
    ds = SliceDataset(data, counted_volume_transforms())
    assert len(ds) == 4 + 5 + 7
    assert sorted(CALLS) == ["patient001", "patient002", "patient003"]
    for index in range(len(ds)):
        ds[index]
    ds[0:3]
    assert len(CALLS) == 3  # slicing ran once per volume, items come from the cache
    assert ds.slice_table[0] == SliceRecord(
        volume_index=0, slice_index=0, patient_id=0, slice_quantile=1, organ_state=0
    )
    assert [r.slice_quantile for r in ds.slice_table if r.volume_index == 2] == slice_quantiles(7)
    assert [r.organ_state for r in ds.slice_table[4:9]] == [1] * 5
    item = ds[5]
    assert item["image"].shape == (1, 16, 16) and int(item["patient_id"]) == 1 and int(item["slice_index"]) == 1


def test_random_transform_per_access_leaves_cache_intact(tmp_path):
    ds = SliceDataset(make_volumes(tmp_path, depths=(4,)), volume_transforms(image_size=16), pretrain_transforms(16))
    cached = ds.data[0]["image"].clone()
    a, b = ds[0], ds[0]
    assert a["image"].shape == a["image_2"].shape == (1, 16, 16)
    assert not torch.equal(a["image"], b["image"])
    assert torch.equal(ds.data[0]["image"], cached) and "image_2" not in ds.data[0]


def test_cache_dir_is_reused_by_a_second_instance(tmp_path):
    data = make_volumes(tmp_path)
    cache_dir = tmp_path / "cache"
    first = SliceDataset(data, counted_volume_transforms(), cache_dir=cache_dir)
    assert len(CALLS) == 3 and len(list(cache_dir.glob("*.pt"))) == 3
    CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cache file that cannot be loaded would warn and be recomputed
        second = SliceDataset(data, counted_volume_transforms(), cache_dir=cache_dir, cache_num_workers=2)
    assert CALLS == [] and len(second) == len(first)
    assert isinstance(second[3]["image"], MetaTensor)
    for index in range(len(first)):
        assert torch.equal(first[index]["image"].as_tensor(), second[index]["image"].as_tensor())
        assert torch.equal(first[index]["label"].as_tensor(), second[index]["label"].as_tensor())
    assert second.slice_table == first.slice_table
    SliceDataset(data, counted_volume_transforms(image_size=8), cache_dir=cache_dir)
    assert len(CALLS) == 3  # another volume transform: another cache entry


def test_threads_keep_order(tmp_path):
    data = make_volumes(tmp_path)
    serial = SliceDataset(data, volume_transforms(image_size=16))
    threaded = SliceDataset(data, volume_transforms(image_size=16), cache_num_workers=2, progress=True)
    assert threaded.slice_table == serial.slice_table
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(serial.data, threaded.data))


def test_dataloader_batches_and_bundle_config(tmp_path):
    data = make_volumes(tmp_path)
    config = {
        "data": data,
        "dataset": {
            "_target_": "gcl_monai.data.slice_dataset.SliceDataset",
            "data": "@data",
            "volume_transform": {"_target_": "gcl_monai.transforms.volume_transforms", "image_size": [16, 16]},
            "transform": {"_target_": "gcl_monai.transforms.pretrain_transforms", "image_size": [16, 16]},
        },
    }
    ds = ConfigParser(config).get_parsed_content("dataset")
    assert isinstance(ds, SliceDataset) and len(ds) == 16
    batch = next(iter(DataLoader(ds, batch_size=6, shuffle=True)))
    assert batch["image"].shape == batch["image_2"].shape == (6, 1, 16, 16)
    for key in ("patient_id", "organ_state", "slice_quantile"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (6,)


def test_seeded_dataloader_is_reproducible(tmp_path):
    data = make_volumes(tmp_path)
    batches = []
    try:
        for _ in range(2):
            set_determinism(seed=3)
            ds = SliceDataset(data, volume_transforms(image_size=16), pretrain_transforms(image_size=16))
            batches.append(next(iter(DataLoader(ds, batch_size=5, shuffle=True))))
    finally:
        set_determinism(seed=None)
    for key in ("image", "image_2", "slice_index", "patient_id"):
        assert torch.equal(batches[0][key], batches[1][key])


def test_unpicklable_volume_transform_still_caches(tmp_path):
    data = make_volumes(tmp_path, depths=(4,))
    volume_transform = Compose([Lambdad(keys="patient", func=lambda name: name.upper()), volume_transforms(16)])
    for _ in range(2):
        ds = SliceDataset(data, volume_transform, cache_dir=tmp_path / "cache")
        assert len(ds) == 4 and ds[0]["patient"] == "PATIENT001"
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 1


def test_volume_transform_must_return_slices(tmp_path):
    with pytest.raises(TypeError, match="list of slice dictionaries"):
        SliceDataset([{"image": np.zeros((1, 4, 4, 4))}], lambda item: item)


def acdc_root() -> Path:
    checkout = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
    root = Path(os.environ.get("GCL_DATA_ROOT", checkout.parent / "shared" / "data"))
    return root / "acdc"


@pytest.mark.realdata
@pytest.mark.skipif(not (acdc_root() / "patient001_frame01.h5").is_file(), reason="real ACDC data not available")
def test_real_acdc_volumes_keep_their_labels():
    files = [acdc_root() / f"patient001_frame0{frame}.h5" for frame in (1, 2)]
    data = [
        {"image": f"{f}#image", "label": f"{f}#label", "patient": "patient001", "patient_id": 0, "organ_state": state}
        for state, f in enumerate(files)
    ]
    ds = SliceDataset(data, volume_transforms(image_size=(128, 128)))
    depths = []
    for f in files:
        with h5py.File(f, "r") as handle:
            depths.append(handle["image"].shape[0])
    assert len(ds) == sum(depths)
    labels = torch.cat([item["label"].flatten() for item in ds.data])
    assert set(labels.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert all(item["image"].shape == (1, 128, 128) for item in ds.data)
    assert [r.organ_state for r in ds.slice_table] == [0] * depths[0] + [1] * depths[1]


def _epoch_views(ds: SliceDataset, num_workers: int, epochs=(1, 2)) -> list[torch.Tensor]:
    loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=num_workers, persistent_workers=num_workers > 0)
    views = []
    for epoch in epochs:
        ds.set_epoch_seed(100 + epoch)
        views.append(torch.cat([torch.cat([b["image"], b["image_2"]], 1) for b in loader]))
    return views


def test_epoch_seed_gives_the_same_views_with_persistent_workers(tmp_path):
    ds = SliceDataset(make_volumes(tmp_path), volume_transforms(image_size=16), pretrain_transforms(16, seed=0))
    serial = _epoch_views(ds, num_workers=0)
    workers = _epoch_views(ds, num_workers=2)
    assert all(torch.equal(a, b) for a, b in zip(serial, workers))
    assert not torch.equal(serial[0], serial[1])  # another epoch, other views
    assert not torch.equal(serial[0][:, 0], serial[0][:, 1])  # two different views of each slice
    # a slice's views depend on (epoch seed, index) only, not on which slices were drawn before
    ds.set_epoch_seed(101)
    assert torch.equal(torch.cat([ds[5]["image"], ds[5]["image_2"]]), serial[0][5])
    with pytest.raises(ValueError, match="non-negative"):
        ds.set_epoch_seed(-1)


def test_epoch_seed_keeps_the_view_distribution(tmp_path):
    """Per-slice seeding draws views from the same distribution as the default per-process random stream."""
    from scipy.stats import ks_2samp

    ds = SliceDataset(make_volumes(tmp_path, depths=(4,)), volume_transforms(image_size=16), pretrain_transforms(16))
    ds.set_epoch_seed(None)
    set_determinism(seed=0)
    stream = [ds[1]["image"] for _ in range(300)]
    seeded = []
    for epoch in range(300):
        ds.set_epoch_seed(epoch)
        seeded.append(ds[1]["image"])
    set_determinism(seed=None)
    # statistics of the views: mean intensity (crop, gamma, scaling, shift), spread (noise, blur), left-right
    # asymmetry (flips, rotations)
    for stat in (
        lambda v: v.mean(),
        lambda v: v.std(),
        lambda v: v[..., :8].mean() - v[..., 8:].mean(),
    ):
        a, b = [float(stat(v)) for v in stream], [float(stat(v)) for v in seeded]
        assert ks_2samp(a, b).pvalue > 1e-3
    assert len({round(float(v.mean()), 6) for v in seeded}) > 250  # the seeds are not reused


def test_epoch_seed_handler_seeds_slices_only_for_worker_loaders(tmp_path):
    from types import SimpleNamespace

    from gcl_monai.handlers import EpochSeedHandler

    ds = SliceDataset(make_volumes(tmp_path, depths=(4,)), volume_transforms(image_size=16), pretrain_transforms(16))
    engine = SimpleNamespace(state=SimpleNamespace(epoch=3), data_loader=SimpleNamespace(dataset=ds, num_workers=2))
    EpochSeedHandler(seed=10)(engine)
    assert int(ds._epoch_seed[0]) == 13  # workers: views a function of (seed + epoch, index)
    first = ds[2]["image"]
    engine.data_loader.num_workers = 0
    EpochSeedHandler(seed=10)(engine)
    assert int(ds._epoch_seed[0]) == -1  # main process: one stream re-seeded per epoch (set_rnd), as before
    ds.set_epoch_seed(13)
    assert torch.equal(ds[2]["image"], first)
    set_determinism(seed=None)
