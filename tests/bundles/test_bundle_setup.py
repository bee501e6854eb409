"""Tests of gcl_monai.bundle: what a bundle config calls before its workflow (split file, phantom, run options)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gcl_monai.bundle import (
    bundle_folder,
    check_overlay,
    check_switches,
    ensure_phantom,
    first_enabled,
    load_or_create_split,
    set_float32_matmul_precision,
    training_loss,
)


def test_check_switches_refuses_anything_but_a_boolean():
    check_switches(pixel_branch=True, mitigate=False)
    with pytest.raises(ValueError, match=r"pixel_branch='false', mitigate=1.*--pixel_branch False"):
        check_switches(pixel_branch="false", mitigate=1, freeze_encoder=False)


def test_check_overlay_refuses_an_overlay_run_alone():
    check_overlay(["train.json", "evaluate.json"], overlay="evaluate.json", base="train.json")
    message = r"evaluate.json is an overlay on train.json: .*\['configs/train.json','configs/evaluate.json'\]"
    with pytest.raises(ValueError, match=message + r".*loaded \['evaluate.json'\]"):
        check_overlay(["evaluate.json"], overlay="evaluate.json", base="train.json")


def test_set_float32_matmul_precision_refuses_a_value_torch_would_ignore():
    try:
        set_float32_matmul_precision("medium")
        assert torch.get_float32_matmul_precision() == "medium"
        with pytest.raises(ValueError, match=r"one of \['highest', 'high', 'medium'\], got 'low'"):
            set_float32_matmul_precision("low")
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_phantom_is_generated_once_and_the_split_written_once(tmp_path):
    folder = ensure_phantom(tmp_path / "phantom", num_patients=4, seed=0, image_size=32)
    marker = tmp_path / "phantom" / ".complete"
    assert marker.read_text() == "4 0 32"
    stamp = marker.stat().st_mtime_ns
    assert ensure_phantom(tmp_path / "phantom", num_patients=4, seed=0, image_size=32) == folder
    assert marker.stat().st_mtime_ns == stamp  # not regenerated
    split_file = tmp_path / "split.json"
    split = load_or_create_split(split_file, folder, dataset="acdc", num_pretrain=1, num_val=1, num_test=1)
    assert split_file.is_file()
    patients = {k: {item["patient"] for item in v} for k, v in split.items()}
    assert {k: len(p) for k, p in patients.items()} == {"pretrain": 1, "train": 1, "val": 1, "test": 1}
    assert len(set().union(*patients.values())) == 4
    # the folder is not read again once the split exists: a missing folder does not matter
    again = load_or_create_split(split_file, tmp_path / "nowhere")
    assert json.dumps(again, sort_keys=True) == json.dumps(split, sort_keys=True)


def test_first_enabled_takes_the_component_its_switch_left_on():
    loader, device_batches = object(), object()
    assert first_enabled(loader, None) is loader
    assert first_enabled(None, device_batches) is device_batches
    with pytest.raises(ValueError, match="all 2 components are switched off"):
        first_enabled(None, None)


def test_training_loss_reads_a_decollated_and_a_batch_output():
    loss = torch.tensor(0.25)
    assert training_loss({"loss": loss, "pred": torch.zeros(2)}) is loss
    assert training_loss([{"loss": loss}, {"loss": loss}]) is loss


def test_bundle_folder_is_the_bundle_from_inside_it_and_from_the_repository_root(tmp_path, monkeypatch):
    """``bundle_root``'s default: ``"."`` inside a bundle (a folder holding ``configs/metadata.json``) or anywhere
    without the bundle under ``bundles/``, ``bundles/<name>`` from a folder that holds it (the repository root)."""
    bundle = tmp_path / "bundles" / "gcl_acdc"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "configs" / "metadata.json").write_text("{}")
    monkeypatch.chdir(bundle)
    assert bundle_folder("gcl_acdc") == "."
    monkeypatch.chdir(tmp_path)
    assert bundle_folder("gcl_acdc") == "bundles/gcl_acdc"
    assert Path(bundle_folder("gcl_acdc"), "configs", "metadata.json").is_file()
    assert bundle_folder("gcl_prostate") == "."
