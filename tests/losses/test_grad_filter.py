"""GradFilter, its pace and LastLayerJacobian: the closed-form gradient magnitudes against autograd, the positives
kept, blocks that change no value and the precision of small magnitudes."""

import math

import pytest
import torch
import torch.nn.functional as F

from gcl_monai.losses import GradFilter, LastLayerJacobian, PixelContrastiveLoss, pace
from gcl_monai.networks import GCLNet


class TestPace:
    def test_values(self):
        assert pace(0, 100) == 0.0
        assert pace(100, 100) == 1.0
        assert pace(50, 100) == pytest.approx(1 + math.log(0.5 + math.exp(-4)) / 4)
        assert pace(1000, 100) == 1.0
        values = [pace(t, 50) for t in range(51)]
        assert values == sorted(values)

    def test_bad_input(self):
        with pytest.raises(ValueError):
            pace(1, 0)
        with pytest.raises(ValueError):
            pace(-1, 10)

    def test_num_keep_and_mask(self):
        gf = GradFilter(0.0)
        assert gf.num_keep(10) == 1
        gf.keep_fraction = 0.25
        assert gf.num_keep(10) == 3
        mags = torch.tensor([[5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 9.0, 8.0, 7.0, 10.0]])
        assert gf.keep_mask(mags).nonzero()[:, 1].tolist() == [1, 3, 4]
        with pytest.raises(ValueError):
            gf.keep_fraction = 1.5


def autograd_magnitudes(net, x, a, b, ratio, tau, samples):
    """One backward pass per positive: norm of d(term)/d(last layer weight, bias), positives/negatives detached."""
    out = net(x)
    u = F.normalize(out["pix"].flatten(2), dim=1).transpose(1, 2)
    z = F.normalize(out["img_map"].detach().flatten(2), dim=1).transpose(1, 2)
    hw = u.shape[1]
    k = math.ceil(ratio * hw)
    params = [net.last_layer.conv.weight, net.last_layer.conv.bias]
    result = []
    for p, slot in samples:
        pool = (z[a, p] @ z[b].T).topk(k).indices
        logits = u[b].detach() @ u[a, p] / tau
        neg = torch.ones(hw, dtype=torch.bool)
        neg[pool] = False
        q = pool[slot]
        term = torch.logaddexp(logits[q], torch.logsumexp(logits[neg], 0)) - logits[q]
        grads = torch.autograd.grad(term, params, retain_graph=True)
        result.append(float(torch.sqrt(sum((g**2).sum() for g in grads))))
    return torch.tensor(result)


def closed_form_magnitudes(net, x, a, b, ratio, tau, samples):
    out = net(x)
    jac = LastLayerJacobian.from_output(net, out)
    loss = PixelContrastiveLoss(temperature=tau, topk_ratio=ratio)
    u = F.normalize(out["pix"].detach().flatten(2), dim=1).transpose(1, 2)
    z = F.normalize(out["img_map"].detach().flatten(2), dim=1).transpose(1, 2)
    hw = u.shape[1]
    k = math.ceil(ratio * hw)
    ai, bi = torch.tensor([a]), torch.tensor([b])
    logits = u[ai] @ u[bi].transpose(1, 2) / tau
    pool = (z[ai] @ z[bi].transpose(1, 2)).topk(k, dim=-1).indices
    is_pos = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, pool, True)
    mags = loss._magnitudes(u, ai, bi, pool, logits.masked_fill(is_pos, float("-inf")), logits.gather(-1, pool), jac)
    return torch.stack([mags[0, p, slot] for p, slot in samples])


@pytest.mark.parametrize(
    "norm,train", [(None, True), (("batch", {}), False), (("group", {"num_groups": 2}), True)], ids=str
)
def test_grad_filter_closed_form_matches_autograd(norm, train):
    """Exact where the normalisation is affine given its statistics (none, batch norm in eval mode); group norm
    (statistics held constant, an approximation) is checked for finite, positive values only."""
    torch.manual_seed(0)
    net = GCLNet(features=(4, 4, 8, 8, 8, 4), proj_dim=6, norm=norm).double()
    net.train(train)
    if not train:
        for m in net.modules():  # non-trivial running statistics
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(4, 1, 48, 48, dtype=torch.double)
    samples = [(p, s) for p in range(0, 9, 2) for s in range(3)]
    got = closed_form_magnitudes(net, x, 0, 2, 0.3, 0.1, samples)
    assert torch.isfinite(got).all() and (got > 0).all()
    if norm is None or not train:
        expected = autograd_magnitudes(net, x, 0, 2, 0.3, 0.1, samples)
        torch.testing.assert_close(got, expected.double(), rtol=1e-6, atol=1e-10)


def test_grad_filter_instance_norm_ranking_agrees_with_autograd():
    """With instance norm the statistics are held constant: the ranking of positives stays close to autograd's."""
    torch.manual_seed(1)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8).double()
    x = torch.randn(4, 1, 64, 64, dtype=torch.double)
    samples = [(p, s) for p in range(0, 16, 3) for s in range(5)]
    got = closed_form_magnitudes(net, x, 1, 3, 0.3, 0.1, samples)
    expected = autograd_magnitudes(net, x, 1, 3, 0.3, 0.1, samples)

    def rank(t):
        return t.argsort().argsort().double()

    corr = torch.corrcoef(torch.stack([rank(got), rank(expected)]))[0, 1]
    assert corr > 0.9
    torch.testing.assert_close(got, expected.double(), rtol=0.25, atol=0.0)


def test_grad_filter_keeps_smallest_gradient_positives():
    """An active filter keeps num_keep positives per pool, and they are the ones with the smallest magnitudes."""
    torch.manual_seed(4)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8)
    out = net(torch.randn(4, 1, 64, 64))
    jac = LastLayerJacobian.from_output(net, out)
    loss = PixelContrastiveLoss(topk_ratio=0.5)
    full = loss(out["pix"], out["img_map"], None, GradFilter(1.0), jac)
    assert float(full) == pytest.approx(float(loss(out["pix"], out["img_map"])), rel=1e-6)
    filtered = loss(out["pix"], out["img_map"], None, GradFilter(0.0), jac)
    assert float(filtered) != pytest.approx(float(full), rel=1e-3)
    filtered.backward()
    assert torch.isfinite(net.last_layer.conv.weight.grad).all()


def _pool_inputs(pairs: int, hw: int, k: int, seed: int):
    """pool_magnitudes' inputs for ``pairs`` (anchor, positive) pairs of a batch of 4 images of ``hw`` pixels."""
    g = torch.Generator().manual_seed(seed)
    anchors, positives = torch.randint(0, 4, (pairs,), generator=g), torch.randint(0, 4, (pairs,), generator=g)
    pool = torch.rand(pairs, hw, hw, generator=g).argsort(-1)[..., :k]
    neg_weights = torch.softmax(torch.randn(pairs, hw, hw, generator=g), -1).scatter(-1, pool, 0.0)
    neg_weights = neg_weights / neg_weights.sum(-1, keepdim=True)
    pos_cos, neg_cos = torch.rand(pairs, hw, k, generator=g) * 2 - 1, torch.rand(pairs, hw, generator=g) * 2 - 1
    return anchors, positives, pool, neg_weights, pos_cos, neg_cos, torch.rand(pairs, hw, k, generator=g)


def test_grad_filter_blocks_change_no_value():
    """Computing the magnitudes in blocks of pairs (cache-sized on a CPU) gives the values of one block."""
    torch.manual_seed(8)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8)
    jac = LastLayerJacobian.from_output(net, net(torch.randn(4, 1, 64, 64)))
    inputs = _pool_inputs(pairs=7, hw=16, k=5, seed=0)
    whole = jac.pool_magnitudes(*inputs)
    assert whole.shape == (7, 16, 5) and (whole > 0).all()
    for elements in (1, 16 * 5 * 16 * 3):  # one pair per block; three pairs (the last block holds one)
        torch.testing.assert_close(jac.pool_magnitudes(*inputs, max_block_elements=elements), whole, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="grad_filter_block_elements"):
        PixelContrastiveLoss(grad_filter_block_elements=0)


def test_grad_filter_small_magnitudes_keep_their_precision():
    """
    The positives GradFilter keeps are those whose u+ is close to the negatives' mean: their magnitude is a small
    difference of large terms. A positive equal to that mean (d = 0) has magnitude 0, and near it the float32
    magnitudes keep their relative precision (formed before the norm, not expanded inside it).
    """
    torch.manual_seed(9)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8)
    x = torch.randn(4, 1, 64, 64)
    jac = LastLayerJacobian.from_output(net, net(x))
    jac64 = LastLayerJacobian.from_output(net.double(), net(x.double()))
    anchors, positives, pool, _, _, _, _ = _pool_inputs(pairs=3, hw=16, k=4, seed=1)
    pool, pos_weight = pool[..., :1].expand(3, 16, 4), torch.ones(3, 16, 4)  # four times the same positive pixel
    neg_weights = torch.zeros(3, 16, 16).scatter(-1, pool[..., :1], 1.0)  # ubar^- = u+ (only d differs)
    neg_cos = torch.rand(3, 16) * 2 - 1
    pos_cos = neg_cos.unsqueeze(-1) + torch.tensor([0.0, 1e-5, 1e-3, 0.5])  # d of the four positives
    got = jac.pool_magnitudes(anchors, positives, pool, neg_weights, pos_cos, neg_cos, pos_weight)
    expected = jac64.pool_magnitudes(
        anchors, positives, pool, neg_weights.double(), pos_cos.double(), neg_cos.double(), pos_weight.double()
    )
    assert (got[..., 0] == 0).all() and (expected[..., 0] == 0).all()
    torch.testing.assert_close(got[..., 1:].double(), expected[..., 1:], rtol=1e-4, atol=0)
    assert (expected[..., 1] <= 1e-4 * expected[..., 3]).all() and (expected[..., 3] > 0).any()  # a real cancellation
