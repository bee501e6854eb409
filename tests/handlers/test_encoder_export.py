"""EncoderExporter: the pre-training network's encoder, written at the end of the run (or after every epoch), loads into
a BasicUNet."""

import pytest
import torch
from ignite.engine import Engine, Events
from monai.handlers import CheckpointLoader
from monai.networks.nets import BasicUNet

from gcl_monai.handlers import EncoderExporter
from gcl_monai.networks import GCLNet
from tests.engines.engine_helpers import FEATURES, build


def test_encoder_export_loads_into_basic_unet(tmp_path):
    trainer, net, _ = build(meta_labels=(None,), combiner="mean", pixel=False)
    EncoderExporter(net, tmp_path / "encoder.pt").attach(trainer)
    trainer.run()
    unet = BasicUNet(spatial_dims=2, out_channels=4, features=FEATURES)
    CheckpointLoader(str(tmp_path / "encoder.pt"), {"model": unet}, strict=False)(trainer)
    for k, v in net.encoder_state_dict().items():
        assert torch.equal(unet.state_dict()[k], v), k


@pytest.mark.parametrize("every_epoch", [False, True])
def test_encoder_written_at_the_end_or_after_every_epoch(tmp_path, every_epoch):
    """The file holds the encoder as it is when written: after each epoch with ``every_epoch``, else only at the end;
    the heads are not in it."""
    net = GCLNet(features=FEATURES, proj_dim=8)
    weight = net.encoder_state_dict()["conv_0.conv_0.conv.weight"].clone()
    engine = Engine(lambda e, batch: net.conv_0.conv_0.conv.weight.data.add_(1.0))  # one step per iteration
    path = tmp_path / "encoder.pt"
    EncoderExporter(net, path, every_epoch=every_epoch).attach(engine)
    seen = []
    engine.add_event_handler(
        Events.EPOCH_COMPLETED,
        lambda e: seen.append(torch.load(path)["conv_0.conv_0.conv.weight"] - weight if path.exists() else None),
    )
    engine.run([0, 1], max_epochs=3)
    if every_epoch:  # written before the epoch's other handlers, after its two steps
        assert [round(float(d.mean()), 4) for d in seen] == [2.0, 4.0, 6.0]
        assert all(float(d.max() - d.min()) < 1e-5 for d in seen)
    else:
        assert seen == [None, None, None]
    final = torch.load(path)
    assert set(final) == set(net.encoder_state_dict()) and not any(k.startswith(("h_", "last")) for k in final)
    torch.testing.assert_close(final["conv_0.conv_0.conv.weight"], weight + 6.0)
    assert [p.name for p in tmp_path.iterdir()] == ["encoder.pt"]  # no partial file left
