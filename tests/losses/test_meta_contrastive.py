"""MetaContrastiveLoss (Eq. 1): hand-computed cases, a literal loop reference of both forms, SimCLR's NT-Xent and the
chance level."""

import math

import pytest
import torch
import torch.nn.functional as F

from gcl_monai.losses import MetaContrastiveLoss, chance_level, positive_mask


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


def test_positive_mask_by_hand():
    """Rows i and i + N are the two views of image i; a row's positives are its other view and every row of an image
    with the same meta label, never the row itself."""
    simclr = positive_mask(3, None)
    assert simclr.nonzero().tolist() == [[0, 3], [1, 4], [2, 5], [3, 0], [4, 1], [5, 2]]
    # labels 0 1 0: images 0 and 2 share a label, rows 0 2 3 5 are each other's positives, rows 1 and 4 a pair
    mask = positive_mask(3, torch.tensor([0, 1, 0]))
    expected = {0: [2, 3, 5], 1: [4], 2: [0, 3, 5], 3: [0, 2, 5], 4: [1], 5: [0, 2, 3]}
    assert {row: mask[row].nonzero().flatten().tolist() for row in range(6)} == expected
    assert mask.dtype == torch.bool and torch.equal(mask, mask.T)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        positive_mask(3, torch.tensor([0, 1]))
