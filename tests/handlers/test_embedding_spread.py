"""EmbeddingSpread: the spread statistics of the image-wise embeddings that tell a collapsed representation."""

import math
from types import SimpleNamespace

import pytest
import torch
from ignite.engine import Engine
from monai.utils import CommonKeys as Keys

from gcl_monai.handlers import EmbeddingSpread


def _spread(embeddings: torch.Tensor) -> dict:
    engine = SimpleNamespace(state=SimpleNamespace(output={Keys.PRED: {"img": embeddings}}))
    EmbeddingSpread()(engine)
    return engine.state.output


def test_a_collapsed_batch_has_no_spread_and_cosine_one():
    output = _spread(torch.tensor([[3.0, 4.0]]).repeat(6, 1))  # every view the same direction
    assert float(output["std/img"]) == pytest.approx(0.0, abs=1e-6)
    assert float(output["cos/img"]) == pytest.approx(1.0, abs=1e-6)


def test_the_cosine_is_the_mean_over_distinct_pairs_and_the_spread_the_mean_std():
    torch.manual_seed(0)
    embeddings = torch.randn(8, 16, requires_grad=True)
    output = _spread(embeddings)
    unit = torch.nn.functional.normalize(embeddings.detach(), dim=1)
    pairs = unit @ unit.T
    off_diagonal = pairs[~torch.eye(8, dtype=torch.bool)]
    assert float(output["cos/img"]) == pytest.approx(float(off_diagonal.mean()), abs=1e-6)
    assert float(output["std/img"]) == pytest.approx(float(unit.std(0).mean()), abs=1e-6)
    assert not output["std/img"].requires_grad and output["cos/img"].ndim == 0


def test_orthogonal_views_have_cosine_zero():
    assert float(_spread(torch.eye(4) * 2)["cos/img"]) == pytest.approx(0.0, abs=1e-6)


def test_embedding_spread_hand_computed():
    """Four embeddings, two pairs of equal directions: 4 of the 12 ordered pairs have cosine 1, the rest 0; each
    dimension of the unit vectors is (1, 0, 1, 0) or (0, 1, 0, 1), standard deviation sqrt(1/3)."""
    engine = Engine(lambda e, b: None)
    engine.state.output = {"pred": {"img": torch.tensor([[3.0, 0.0], [0.0, 2.0], [0.5, 0.0], [0.0, 7.0]])}}
    EmbeddingSpread()(engine)
    assert float(engine.state.output["cos/img"]) == pytest.approx(1 / 3)
    assert float(engine.state.output["std/img"]) == pytest.approx(math.sqrt(1 / 3))
