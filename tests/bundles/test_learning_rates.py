"""The pre-trained encoder's learning rate in fine-tuning (gcl_monai.bundle.learning_rates), alone and through the
demo bundle's optimiser."""

import pytest


@pytest.mark.parametrize(
    ("init", "scale", "lrs"), [("gcl", 0.1, [1e-4, 1e-3]), ("random", 0.1, [1e-3]), ("gcl", 1.0, [1e-3])]
)
def test_train_bundle_encoder_lr_scale(init, scale, lrs):
    from pathlib import Path

    from monai.bundle import ConfigWorkflow

    repo = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
    workflow = ConfigWorkflow(
        config_file=str(repo / "bundles" / "gcl_demo" / "configs" / "train.json"),
        workflow_type=None,
        init=init,
        encoder_lr_scale=scale,
        lr=1e-3,
    )
    optimizer = workflow.parser.get_parsed_content("optimizer")
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx(lrs)


def test_encoder_learning_rate_by_hand():
    """lr times the scale for a pre-trained encoder; None (one parameter group at the optimiser's lr) at scale 1 or
    from random weights, whatever the scale."""
    from gcl_monai.bundle import encoder_learning_rate

    assert encoder_learning_rate(1e-3, 0.1, "gcl") == pytest.approx(1e-4)
    assert encoder_learning_rate(2e-3, 0.5, "simclr") == pytest.approx(1e-3)
    assert encoder_learning_rate(1e-3, 0.0, "gcl") == 0.0  # a frozen-by-rate encoder is a rate, not None
    assert encoder_learning_rate(1e-3, 1, "gcl") is None
    assert encoder_learning_rate(1e-3, 0.1, "random") is None
