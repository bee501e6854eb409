"""The label-free measures of embeddings: effective rank, alignment, uniformity, by hand and over a loader's batches."""

import pytest
import torch

from gcl_monai.diagnose import alignment, embedding_rank, uniformity


def test_label_free_measures_by_hand():
    one_direction = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    assert embedding_rank(one_direction) == pytest.approx(1.0, abs=1e-5)
    assert embedding_rank(torch.eye(4)) == pytest.approx(4.0, rel=1e-5)
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert alignment(z, z) == 0.0 and alignment(z, -z) == pytest.approx(4.0)
    # two orthogonal unit vectors: squared distance 2, log exp(-2 * 2) = -4; all identical: 0
    assert uniformity(z) == pytest.approx(-4.0) and uniformity(torch.ones(5, 3)) == pytest.approx(0.0)


def test_representation_measures_over_the_first_batches():
    """The first ``max_batches`` batches of the engine's loader: the first view's embeddings ranked and spread, the two
    views aligned (identical views: alignment 0), the pooled features likewise; the network's mode restored."""
    from types import SimpleNamespace

    from gcl_monai.diagnose import representation_measures

    class Net(torch.nn.Module):
        def forward(self, x):
            assert not self.training
            return {"img": x.flatten(1)[:, :3], "features": x.repeat(1, 5, 1, 1)}

    g = torch.Generator().manual_seed(0)
    batches = [{"image": torch.rand(4, 1, 2, 2, generator=g)} for _ in range(3)]
    engine = SimpleNamespace(
        network=Net().train(),
        data_loader=batches,
        views=lambda batch: torch.cat([batch["image"], batch["image"]]),  # two identical views
    )
    got = representation_measures(engine, max_batches=2)
    z = torch.cat([b["image"] for b in batches[:2]])  # 8 images, the third batch not read
    assert got["num_images"] == 8 and got["dim/img"] == 3 and got["dim/features"] == 5
    assert got["rank/img"] == pytest.approx(embedding_rank(z.flatten(1)[:, :3]))
    assert got["uniformity/img"] == pytest.approx(uniformity(z.flatten(1)[:, :3]))
    assert got["rank/features"] == pytest.approx(embedding_rank(z.flatten(1).mean(1, keepdim=True).repeat(1, 5)))
    assert got["alignment/img"] == 0.0 and got["alignment/features"] == 0.0
    assert engine.network.training
