"""PixelContrastiveLoss (Eq. 5-6): a literal loop reference, the pairs of positive images, chunking and merged
meta labels that change no value."""

import math

import pytest
import torch
import torch.nn.functional as F

from gcl_monai.losses import GradFilter, LastLayerJacobian, PixelContrastiveLoss
from gcl_monai.networks import GCLNet


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
