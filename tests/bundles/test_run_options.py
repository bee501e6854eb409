"""What a bundle config calls on its run options (gcl_monai.bundle.run_options): switches refused unless boolean,
components switched on or off, an overlay run without its base refused, resume refused where it cannot continue,
the matmul precision, the training loss."""

import pytest
import torch

from gcl_monai.bundle import (
    check_overlay,
    check_resume,
    check_switches,
    first_enabled,
    if_enabled,
    set_float32_matmul_precision,
    training_loss,
)


def test_if_enabled_keeps_the_component_only_when_its_switch_is_on():
    component = object()
    assert if_enabled(component, True) is component and if_enabled(component, False) is None
    assert first_enabled(if_enabled(component, False), "fallback") == "fallback"  # as a config pairs them


def test_check_switches_refuses_anything_but_a_boolean():
    check_switches(pixel_branch=True, mitigate=False)
    with pytest.raises(ValueError, match=r"pixel_branch='false', mitigate=1.*--pixel_branch False"):
        check_switches(pixel_branch="false", mitigate=1, freeze_encoder=False)


def test_check_overlay_refuses_an_overlay_run_alone():
    check_overlay(["train.json", "evaluate.json"], overlay="evaluate.json", base="train.json")
    message = r"evaluate.json is an overlay on train.json: .*\['configs/train.json','configs/evaluate.json'\]"
    with pytest.raises(ValueError, match=message + r".*loaded \['evaluate.json'\]"):
        check_overlay(["evaluate.json"], overlay="evaluate.json", base="train.json")


def test_check_resume_refuses_a_semi_supervised_run_only():
    check_resume(True, None)
    check_resume(False, "mean_teacher")
    with pytest.raises(ValueError, match=r"resume=True is not available with semi_supervised='vat'"):
        check_resume(True, "vat")


def test_set_float32_matmul_precision_refuses_a_value_torch_would_ignore():
    try:
        set_float32_matmul_precision("medium")
        assert torch.get_float32_matmul_precision() == "medium"
        with pytest.raises(ValueError, match=r"one of \['highest', 'high', 'medium'\], got 'low'"):
            set_float32_matmul_precision("low")
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")


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
