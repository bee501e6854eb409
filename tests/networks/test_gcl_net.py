"""GCLNet's image head options: the paper's head by default, a batch-normalised head, pooling before the head."""

import pytest
import torch
import torch.nn as nn

from gcl_monai.networks import GCLNet, ProjectionHead

FEATURES = (8, 8, 16, 16, 32, 8)


def _mean_pairwise_cosine(z: torch.Tensor) -> float:
    u = nn.functional.normalize(z, dim=1)
    return float((u @ u.T)[~torch.eye(len(u), dtype=torch.bool)].mean())


def test_default_head_is_the_papers():
    net = GCLNet(features=FEATURES, proj_dim=16)
    assert [type(m) for m in net.h_img] == [nn.Conv2d, nn.ReLU, nn.Conv2d]
    assert set(net.h_img.state_dict()) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # old checkpoints load
    deep = ProjectionHead(2, 32, 16, num_layers=3, norm="batch")
    assert [type(m) for m in deep] == [nn.Conv2d, nn.BatchNorm2d, nn.ReLU] * 2 + [nn.Conv2d, nn.BatchNorm2d]
    with pytest.raises(ValueError, match="num_layers"):
        ProjectionHead(2, 32, 16, num_layers=0)
    with pytest.raises(ValueError):
        GCLNet(features=FEATURES, image_pooling="max")


def test_batch_norm_head_centres_a_fresh_network():
    # a fresh encoder maps different images to nearly the same direction; the normalised head does not
    torch.manual_seed(0)
    x = torch.rand(16, 1, 32, 32) * 0.3
    plain = GCLNet(features=FEATURES, proj_dim=16, norm="batch")
    torch.manual_seed(0)
    centred = GCLNet(features=FEATURES, proj_dim=16, norm="batch", img_head_norm="batch")
    assert _mean_pairwise_cosine(plain(x)["img"].detach()) > 0.5
    assert abs(_mean_pairwise_cosine(centred(x)["img"].detach())) < 0.1
    assert centred(x)["pix"].shape == plain(x)["pix"].shape  # the pixel head is the paper's in both


def test_pooling_before_the_head():
    torch.manual_seed(1)
    net = GCLNet(features=FEATURES, proj_dim=16, image_pooling="before_head").eval()
    x = torch.rand(3, 1, 32, 32)
    out = net(x)
    pooled = out["features"].mean(dim=(2, 3), keepdim=True)
    assert torch.allclose(out["img"], net.h_img(pooled).flatten(1), atol=1e-6)
    assert out["img_map"].shape == (3, 16, 2, 2)  # the per-pixel map (Eq. 6 affinity) is still h_img per pixel


def test_trainable_parameters_freeze_and_encoder_learning_rate():
    from monai.networks.nets import BasicUNet

    from gcl_monai.networks import ENCODER_PREFIXES, trainable_parameters

    net = BasicUNet(spatial_dims=2, in_channels=1, out_channels=2, features=(4, 4, 8, 8, 16, 4))
    names = {id(p): n for n, p in net.named_parameters()}
    assert trainable_parameters(net) == list(net.parameters())
    decoder = trainable_parameters(net, freeze_encoder=True)
    assert decoder and all(not names[id(p)].startswith(ENCODER_PREFIXES) for p in decoder)
    assert all(not p.requires_grad for n, p in net.named_parameters() if n.startswith(ENCODER_PREFIXES))
    groups = trainable_parameters(net, encoder_lr=1e-4)
    assert [len(g["params"]) for g in groups] == [
        sum(n.startswith(ENCODER_PREFIXES) for n, _ in net.named_parameters()),
        sum(not n.startswith(ENCODER_PREFIXES) for n, _ in net.named_parameters()),
    ]
    assert all(names[id(p)].startswith(ENCODER_PREFIXES) for p in groups[0]["params"])
    assert all(p.requires_grad for p in net.parameters())  # unfrozen again
    optimizer = torch.optim.Adam(groups, lr=1e-3)
    assert [g["lr"] for g in optimizer.param_groups] == [1e-4, 1e-3]
    # a frozen encoder has no group of its own
    assert trainable_parameters(net, freeze_encoder=True, encoder_lr=1e-4) == decoder
