import math

import pytest
import torch
import torch.nn.functional as F

from gcl_monai.losses import (
    GradFilter,
    LastLayerJacobian,
    MetaContrastiveLoss,
    PixelContrastiveLoss,
    chance_level,
    pace,
)
from gcl_monai.networks import GCLNet


def reference_meta_loss(z, labels, tau, form="out", view_weight=None):
    """Literal Eq. (1) (form "out") and its mean-inside-the-log form ("in"): loops over anchors and positives."""
    z = F.normalize(z.double(), dim=1)
    two_n = z.shape[0]
    n = two_n // 2
    image_label = list(range(n)) if labels is None else labels.tolist()
    row_label = image_label + image_label
    total = 0.0
    for i in range(two_n):
        denom = sum(math.exp(float(z[i] @ z[a]) / tau) for a in range(two_n) if a != i)
        view = (i + n) % two_n
        others = [j for j in range(two_n) if j not in (i, view) and row_label[j] == row_label[i]]
        if view_weight is None or labels is None or not others:
            weights = {j: 1 / (len(others) + 1) for j in [view, *others]}
        else:
            weights = {view: view_weight, **{j: (1 - view_weight) / len(others) for j in others}}
        prob = {j: math.exp(float(z[i] @ z[j]) / tau) / denom for j in weights}
        if form == "out":
            total += -sum(w * math.log(prob[j]) for j, w in weights.items())
        else:
            total += -math.log(sum(w * prob[j] for j, w in weights.items()))
    return total / two_n


class TestMetaContrastiveLoss:
    def test_hand_computed(self):
        # two images, two views: rows 0,1 view 1 and rows 2,3 view 2; unit vectors
        z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
        tau = 0.5
        # anchor 0: sims to rows 1,2,3 = 0, 1, 0 -> logits 0, 2, 0; positive (SimCLR) is row 2
        expected_simclr = -math.log(math.exp(2) / (math.exp(2) + 2))
        loss = MetaContrastiveLoss(temperature=tau)
        assert float(loss(z)) == pytest.approx(expected_simclr, rel=1e-6)
        # same meta label for both images: row 0's positives are rows 1, 2, 3
        denom = math.exp(2) + 2
        expected_meta = -(math.log(1 / denom) * 2 + math.log(math.exp(2) / denom)) / 3
        assert float(loss(z, torch.tensor([7, 7]))) == pytest.approx(expected_meta, rel=1e-6)

    @pytest.mark.parametrize("labels", [None, torch.tensor([0, 1, 0, 2, 1]), torch.tensor([3, 3, 3, 3, 3])])
    def test_against_reference(self, labels):
        torch.manual_seed(0)
        z = torch.randn(10, 6)
        got = MetaContrastiveLoss(temperature=0.1)(z, labels)
        assert float(got) == pytest.approx(reference_meta_loss(z, labels, 0.1), rel=1e-5)

    @pytest.mark.parametrize("form", ["out", "in"])
    @pytest.mark.parametrize("view_weight", [None, 0.5, 0.0])
    @pytest.mark.parametrize("labels", [None, torch.tensor([0, 1, 0, 2, 1]), torch.tensor([3, 3, 3, 3, 3])])
    def test_forms_against_reference(self, labels, form, view_weight):
        torch.manual_seed(2)
        z = torch.randn(10, 6)
        got = MetaContrastiveLoss(temperature=0.2, loss_form=form, view_weight=view_weight)(z, labels)
        assert float(got) == pytest.approx(reference_meta_loss(z, labels, 0.2, form, view_weight), rel=1e-5)

    def test_worked_values_many_positives(self):
        # N = 48 images (96 rows), a meta label shared by 24 images: 47 positives per row, tau = 0.1
        n, tau = 48, 0.1
        labels = torch.arange(n) % 2
        collapsed = torch.ones(2 * n, 8)
        blind = torch.eye(n).repeat(2, 1)  # each image's two views identical, different images orthogonal
        separated = torch.where(labels.repeat(2)[:, None] == 0, 1.0, -1.0) * torch.ones(2 * n, 4)
        out = MetaContrastiveLoss(tau, loss_form="out")
        inside = MetaContrastiveLoss(tau, loss_form="in")
        e = math.exp(1 / tau)
        # collapse: every row at chance, ln(2N - 1) = ln 95 = 4.55 for both forms
        assert chance_level(n) == pytest.approx(math.log(95))
        assert float(out(collapsed, labels)) == pytest.approx(math.log(95), rel=1e-6)
        assert float(inside(collapsed, labels)) == pytest.approx(math.log(95), rel=1e-6)
        # discriminative but blind to the label: Eq. (1) as written, -(1/47)(1/tau) + ln(e^(1/tau) + 94) = 9.79
        assert float(out(blind, labels)) == pytest.approx(-(1 / tau) / 47 + math.log(e + 94), rel=1e-6)
        assert float(out(blind, labels)) == pytest.approx(9.79, abs=5e-3)
        # ... while the mean inside the log scores it -ln((1/47)(e^(1/tau) + 46) / (e^(1/tau) + 94)) = 3.85,
        # below collapse
        assert float(inside(blind, labels)) == pytest.approx(math.log(47) + math.log((e + 94) / (e + 46)), rel=1e-6)
        assert float(inside(blind, labels)) == pytest.approx(3.85, abs=5e-3)
        # classes separated: ln(47 + 48 / e^(2/tau)) = 3.85, the floor ln|P| of both forms
        for loss in (out, inside):
            assert float(loss(separated, labels)) == pytest.approx(math.log(47 + 48 / e**2), rel=1e-6)
        with pytest.raises(ValueError, match="num_images"):
            chance_level(0)

    def test_view_weight(self):
        # the other view alone (weight 1) is SimCLR's NT-Xent whatever the meta label
        torch.manual_seed(3)
        z = torch.randn(8, 5)
        labels = torch.tensor([0, 0, 1, 1])
        for form in ("out", "in"):
            only_view = MetaContrastiveLoss(0.1, loss_form=form, view_weight=1.0)(z, labels)
            assert float(only_view) == pytest.approx(float(MetaContrastiveLoss(0.1)(z)), rel=1e-6)
        with pytest.raises(ValueError, match="view_weight"):
            MetaContrastiveLoss(view_weight=1.5)
        with pytest.raises(ValueError):
            MetaContrastiveLoss(loss_form="inside")

    def test_simclr_is_nt_xent(self):
        # NT-Xent written as a cross-entropy over the 2N - 1 other rows with the other view as target
        torch.manual_seed(1)
        z = F.normalize(torch.randn(8, 5), dim=1)
        logits = (z @ z.T / 0.2).fill_diagonal_(float("-inf"))
        target = torch.arange(8).add(4).remainder(8)
        assert float(MetaContrastiveLoss(0.2)(z)) == pytest.approx(float(F.cross_entropy(logits, target)), rel=1e-6)

    def test_gradient_flows_and_bad_input(self):
        z = torch.randn(6, 4, requires_grad=True)
        MetaContrastiveLoss()(z, torch.tensor([0, 0, 1])).backward()
        assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0
        with pytest.raises(ValueError, match="shape"):
            MetaContrastiveLoss()(torch.randn(5, 4))
        with pytest.raises(ValueError, match="labels"):
            MetaContrastiveLoss()(torch.randn(6, 4), torch.tensor([0, 1]))
        with pytest.raises(ValueError, match="temperature"):
            MetaContrastiveLoss(temperature=0.0)


def reference_pixel_loss(pix, img_map, labels, tau, ratio, keep=None):
    """Literal Eq. (5)-(6): loops over (anchor image, positive image) pairs and anchor pixels."""
    u = F.normalize(pix.double().flatten(2), dim=1).transpose(1, 2)
    z = F.normalize(img_map.double().flatten(2), dim=1).transpose(1, 2)
    two_n, hw = u.shape[:2]
    n = two_n // 2
    image_label = list(range(n)) if labels is None else labels.tolist()
    row_label = image_label + image_label
    k = math.ceil(ratio * hw)
    values = []
    for i in range(two_n):
        for j in range(two_n):
            if j == i or not (row_label[i] == row_label[j] or j == (i + n) % two_n):
                continue
            for p in range(hw):
                aff = [float(z[i, p] @ z[j, q]) for q in range(hw)]
                pool = sorted(range(hw), key=lambda q: -aff[q])[:k]
                negs = [q for q in range(hw) if q not in pool]
                neg_sum = sum(math.exp(float(u[i, p] @ u[j, q]) / tau) for q in negs)
                terms = []
                for q in pool:
                    e = math.exp(float(u[i, p] @ u[j, q]) / tau)
                    terms.append(-math.log(e / (e + neg_sum)))
                if keep is not None:
                    terms = sorted(terms)[:keep]  # only valid for the ordering test below
                values.append(sum(terms) / len(terms))
    return sum(values) / len(values)


class TestPixelContrastiveLoss:
    @pytest.mark.parametrize("labels", [None, torch.tensor([0, 1, 0])])
    def test_against_reference(self, labels):
        torch.manual_seed(0)
        pix, img_map = torch.randn(6, 5, 3, 3), torch.randn(6, 7, 3, 3)
        got = PixelContrastiveLoss(temperature=0.2, topk_ratio=0.3, pair_chunk_size=3)(pix, img_map, labels)
        assert float(got) == pytest.approx(reference_pixel_loss(pix, img_map, labels, 0.2, 0.3), rel=1e-5)

    def test_chunking_does_not_change_value(self):
        torch.manual_seed(2)
        pix, img_map = torch.randn(8, 4, 4, 4), torch.randn(8, 4, 4, 4)
        labels = torch.tensor([0, 0, 1, 1])
        a = PixelContrastiveLoss(pair_chunk_size=1)(pix, img_map, labels)
        b = PixelContrastiveLoss(pair_chunk_size=1000)(pix, img_map, labels)
        assert float(a) == pytest.approx(float(b), rel=1e-6)

    def test_max_positive_images(self):
        torch.manual_seed(3)
        loss = PixelContrastiveLoss(max_positive_images=2)
        labels = torch.zeros(5, dtype=torch.long)  # every row is a positive of every other row
        pairs = loss.pairs(5, labels, torch.device("cpu"))
        counts = torch.bincount(pairs[:, 0], minlength=10)
        assert (counts == 2).all()
        pair_set = {tuple(p) for p in pairs.tolist()}
        assert all((i, (i + 5) % 10) in pair_set for i in range(10))  # the other view is always kept

    def test_bad_input(self):
        with pytest.raises(ValueError, match="topk_ratio"):
            PixelContrastiveLoss(topk_ratio=1.0)
        with pytest.raises(ValueError, match="must agree"):
            PixelContrastiveLoss()(torch.randn(4, 3, 2, 2), torch.randn(4, 3, 3, 3))
        with pytest.raises(ValueError, match="LastLayerJacobian"):
            PixelContrastiveLoss()(torch.randn(4, 3, 4, 4), torch.randn(4, 3, 4, 4), grad_filter=GradFilter(0.0))


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


def test_forward_multi_equals_separate_losses():
    """Merging the pairs of several meta labels computes each pair once but changes no value."""
    torch.manual_seed(5)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8)
    out = net(torch.randn(8, 1, 64, 64))
    jac = LastLayerJacobian.from_output(net, out)
    labels = [torch.tensor([0, 1, 0, 1]), None, torch.tensor([2, 2, 2, 3])]
    loss = PixelContrastiveLoss(topk_ratio=0.5)
    for gf in (None, GradFilter(0.3)):
        merged = loss.forward_multi(out["pix"], out["img_map"], labels, gf, jac)
        for y, value in zip(labels, merged):
            assert float(value) == pytest.approx(float(loss(out["pix"], out["img_map"], y, gf, jac)), rel=1e-6)


def test_chunk_size_changes_no_value_or_gradient():
    """The memory bound of GradFilter's chunks changes neither the loss nor its gradient."""
    torch.manual_seed(6)
    net = GCLNet(features=(4, 4, 8, 8, 16, 4), proj_dim=8)
    out = net(torch.randn(8, 1, 64, 64))
    jac = LastLayerJacobian.from_output(net, out)
    labels = [torch.tensor([0, 1, 0, 1]), torch.tensor([2, 2, 2, 3])]
    results = []
    for elements in (1, 2**12, 2**30):  # one pair per chunk .. all pairs at once
        loss = PixelContrastiveLoss(topk_ratio=0.5, max_positive_images=3, max_chunk_elements=elements)
        pix = out["pix"].detach().requires_grad_(True)
        torch.manual_seed(7)  # the same sub-sampling of positive images
        values = loss.forward_multi(pix, out["img_map"], labels, GradFilter(0.3), jac)
        (grad,) = torch.autograd.grad(sum(values), pix)
        results.append((torch.stack(values).detach(), grad))
    for values, grad in results[1:]:
        assert torch.allclose(values, results[0][0], rtol=1e-6) and torch.allclose(grad, results[0][1], atol=1e-7)
    with pytest.raises(ValueError, match="max_chunk_elements"):
        PixelContrastiveLoss(max_chunk_elements=0)


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
