"""Consistency losses of semi-supervised fine-tuning, on hand-computed cases and against finite differences."""

import math

import pytest
import torch
from torch import nn

from gcl_monai.losses import InterpolationConsistency, MeanTeacherConsistency, VirtualAdversarialLoss, sigmoid_rampup


def test_sigmoid_rampup_values():
    assert sigmoid_rampup(0, 100) == pytest.approx(math.exp(-5))
    assert sigmoid_rampup(50, 100) == pytest.approx(math.exp(-1.25))
    assert sigmoid_rampup(100, 100) == 1.0 and sigmoid_rampup(500, 100) == 1.0
    assert sigmoid_rampup(3, 0) == 1.0


def _conv1x1(weights, bias):
    """A 1x1 convolution from 1 channel to len(weights) classes with the given weights and biases."""
    conv = nn.Conv2d(1, len(weights), 1)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor(weights, dtype=torch.float32).view(-1, 1, 1, 1))
        conv.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    return conv


def test_mean_teacher_consistency_hand_computed():
    # one pixel of value 1: student logits (0, 0) -> (0.5, 0.5); teacher logits (ln 3, 0) -> (0.75, 0.25)
    student = _conv1x1([0.0, 0.0], [0.0, 0.0])
    teacher = _conv1x1([math.log(3.0), 0.0], [0.0, 0.0])
    loss = MeanTeacherConsistency(teacher, noise_std=0.0)(student, torch.ones(1, 1, 1, 1))
    assert loss.item() == pytest.approx((0.25**2 + 0.25**2) / 2)
    loss.backward()
    assert student.weight.grad is not None and student.weight.grad.abs().sum() > 0
    assert teacher.weight.grad is None, "the teacher must not receive gradients"


def test_mean_teacher_noise_is_clipped():
    seen = []

    class Record(nn.Module):
        def forward(self, x):
            seen.append(x.clone())
            return torch.zeros(x.shape[0], 2, *x.shape[2:])

    MeanTeacherConsistency(Record(), noise_std=0.1)(Record(), torch.zeros(4, 1, 16, 16))
    teacher_in, student_in = seen
    assert 0 < teacher_in.abs().max() <= 0.2 + 1e-7 and 0 < student_in.abs().max() <= 0.2 + 1e-7
    assert not torch.equal(teacher_in, student_in), "student and teacher get independent noises"


def test_interpolation_consistency_mixes_inputs_and_targets():
    seen = []

    class Student(nn.Module):
        def forward(self, x):
            seen.append(x.clone())
            return torch.cat([x, torch.zeros_like(x)], dim=1)  # logits (x, 0)

    teacher = _conv1x1([2.0, 0.0], [0.0, 0.0])  # logits (2x, 0)
    images = torch.tensor([0.0, 1.0, 3.0]).view(3, 1, 1, 1)
    ict = InterpolationConsistency(teacher, alpha=0.4).set_random_state(seed=0)
    loss = ict(Student(), images)
    weight, perm, _ = ict.mixup._params
    lam = weight.view(-1, 1, 1, 1)
    mixed = lam * images + (1 - lam) * images[perm]
    torch.testing.assert_close(seen[0], mixed)
    p_teacher = torch.sigmoid(2 * images)  # softmax((2x, 0))[0]
    target0 = lam * p_teacher + (1 - lam) * p_teacher[perm]
    p_student = torch.sigmoid(mixed)
    expected = torch.mean(torch.cat([(p_student - target0) ** 2, ((1 - p_student) - (1 - target0)) ** 2], dim=1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert not torch.allclose(mixed, images), "the draw must actually mix (else the test checks nothing)"


def _kl(logits_p, logits_q):
    log_p, log_q = torch.log_softmax(logits_p, 1), torch.log_softmax(logits_q, 1)
    return (log_p.exp() * (log_p - log_q)).sum(1).mean()


def test_vat_perturbation_norm_and_direction_match_finite_differences():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Tanh(), nn.Conv2d(4, 3, 3, padding=1)).double()
    images = torch.rand(2, 1, 3, 3, dtype=torch.float64)
    logits = net(images).detach()
    vat = VirtualAdversarialLoss(xi=1e-2, eps=0.5)
    torch.manual_seed(1)
    r_adv = vat.perturbation(net, images, logits)
    assert r_adv.flatten(1).norm(dim=1).tolist() == pytest.approx([0.5, 0.5])
    # the same random direction d, then the gradient of D(r) = KL(p(x) || p(x + r)) at r = xi d, by central differences
    torch.manual_seed(1)
    d = torch.randn_like(images)
    d = d / d.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    r0, h = 1e-2 * d, 1e-6
    grad = torch.zeros_like(images)
    for i in range(images.numel()):
        e = torch.zeros(images.numel(), dtype=torch.float64)
        e[i] = h
        e = e.view_as(images)
        grad.view(-1)[i] = (_kl(logits, net(images + r0 + e)) - _kl(logits, net(images + r0 - e))) / (2 * h)
    direction = grad / grad.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    torch.testing.assert_close(r_adv / 0.5, direction, atol=1e-5, rtol=1e-4)
    # the loss is the KL at the adversarial point, and only that branch carries gradients
    torch.manual_seed(1)
    loss = vat(net, images)
    assert loss.item() == pytest.approx(_kl(logits, net(images + r_adv)).item(), rel=1e-6)
    loss.backward()
    assert all(p.grad is not None for p in net.parameters())


def test_consistency_arguments_are_checked():
    with pytest.raises(ValueError, match="noise_std"):
        MeanTeacherConsistency(nn.Identity(), noise_std=-1)
    with pytest.raises(ValueError, match="alpha"):
        InterpolationConsistency(nn.Identity(), alpha=0)
    with pytest.raises(ValueError, match="xi and eps"):
        VirtualAdversarialLoss(eps=0)
