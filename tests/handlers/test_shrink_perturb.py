"""ShrinkPerturb: w <- shrink * w + perturb * w0 on the encoder's convolutions, at the start of fine-tuning."""

import pytest
import torch
from ignite.engine import Engine, Events
from monai.networks.nets import BasicUNet

from gcl_monai.handlers import ShrinkPerturb

FEATURES = (4, 4, 8, 8, 16, 4)


def unet(seed: int) -> BasicUNet:
    torch.manual_seed(seed)
    return BasicUNet(spatial_dims=2, in_channels=1, out_channels=3, features=FEATURES, norm="batch")


def encoder_conv_weights(net) -> dict:
    state = net.state_dict()
    return {k: v for k, v in state.items() if k.startswith(("conv_0.", "down_")) and k.endswith("conv.weight")}


def test_weights_become_shrunk_loaded_plus_perturbed_fresh():
    loaded, fresh = unet(seed=1), unet(seed=7)  # the handler's fresh draw for seed 7 is BasicUNet's own at seed 7
    before = {k: v.clone() for k, v in loaded.state_dict().items()}
    ShrinkPerturb(loaded, shrink=0.5, perturb=0.25, seed=7)()
    after = loaded.state_dict()
    expected = {k: 0.5 * before[k] + 0.25 * w0 for k, w0 in encoder_conv_weights(fresh).items()}
    assert len(expected) == 10  # two convolutions in each of the five encoder blocks
    for key, value in after.items():
        if key in expected:
            torch.testing.assert_close(value, expected[key], rtol=0, atol=1e-7)
        else:  # biases, normalisation, decoder: unchanged
            assert torch.equal(value, before[key]), key


def test_runs_after_the_loader_on_started_and_unwraps_data_parallel():
    net = unet(seed=1)
    engine = Engine(lambda e, b: None)
    loaded = {k: torch.full_like(v, 2.0) for k, v in net.state_dict().items()}
    engine.add_event_handler(Events.STARTED, lambda _: net.load_state_dict(loaded))  # stands for CheckpointLoader
    ShrinkPerturb(torch.nn.DataParallel(net), shrink=0.5, perturb=0.0).attach(engine)
    engine.run([0], max_epochs=1)
    weights = encoder_conv_weights(net)
    assert all(torch.equal(w, torch.full_like(w, 1.0)) for w in weights.values())
    assert torch.equal(net.final_conv.weight, torch.full_like(net.final_conv.weight, 2.0))


def test_same_seed_same_draw_and_bad_arguments():
    a, b = unet(seed=1), unet(seed=1)
    ShrinkPerturb(a, 0.0, 1.0, seed=3)()
    ShrinkPerturb(b, 0.0, 1.0, seed=3)()
    assert all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())
    with pytest.raises(ValueError, match="shrink and perturb"):
        ShrinkPerturb(a, shrink=-0.1, perturb=1.0)
    with pytest.raises(ValueError, match="shrink and perturb"):
        ShrinkPerturb(a, shrink=0.0, perturb=0.0)
    with pytest.raises(ValueError, match="no convolution"):
        ShrinkPerturb(a, 0.5, 1.0, prefixes=("encoder.",))
