"""Tests of GradMitigator (Algorithm 1 of the GCL paper)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from gcl_monai.gradients import GradMitigator
from gcl_monai.gradients.algorithm1 import algorithm1
from tests.gradients.gradient_helpers import SHAPES, _random_grads


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a.flatten() @ b.flatten() / (a.norm() * b.norm()))


def test_hand_computed_2d_case():
    # M = 2, g_1 = [1, 0], g_2 = [-1, 1], beta = 0.5, targets start at 0.
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    mitigator = GradMitigator(num_tasks=2, beta=0.5)
    (out,) = mitigator.combine([[g1], [g2]])

    # i = 1, j = 2: w = (1 * -1 + 0 * 1) / (|g_1| |g_2|) = -1 / (1 * sqrt(2)) = -1/sqrt(2) ~ -0.70711
    w = -1 / math.sqrt(2)
    # t_12 = (1 - 0.5) * 0 + 0.5 * w = -1 / (2 sqrt(2)) ~ -0.35355; w < t_12 -> correction
    t = -1 / (2 * math.sqrt(2))
    # sqrt(1 - w^2) = 1/sqrt(2); sqrt(1 - t^2) = sqrt(1 - 1/8) = sqrt(7/8) = sqrt(7) / (2 sqrt(2))
    # numerator: t sqrt(1 - w^2) - w sqrt(1 - t^2) = -1/4 + sqrt(7)/4 = (sqrt(7) - 1) / 4 ~ 0.41144
    # mu_1 = |g_1| (sqrt(7) - 1)/4 / (|g_2| sqrt(7/8)) = ((sqrt(7) - 1)/4) / (sqrt(7)/2) = (sqrt(7) - 1) / (2 sqrt(7))
    mu1 = (math.sqrt(7) - 1) / (2 * math.sqrt(7))  # ~ 0.31102
    g1_prime = torch.tensor([1 - mu1, mu1], dtype=torch.float64)  # ~ [0.68898, 0.31102]
    # i = 2, j = 1: g'_2 starts at the ORIGINAL g_2, cosine with the ORIGINAL g_1 is again w = -1/sqrt(2),
    # t_21 = 0.5 * 0 + 0.5 * w = t; correction with |g'_2| = sqrt(2), |g_1| = 1:
    # mu_2 = sqrt(2) ((sqrt(7) - 1)/4) / (1 * sqrt(7)/(2 sqrt(2))) = (sqrt(7) - 1) / sqrt(7) ~ 0.62204
    mu2 = (math.sqrt(7) - 1) / math.sqrt(7)
    g2_prime = torch.tensor([-1 + mu2, 1.0], dtype=torch.float64)  # = [-1/sqrt(7), 1] ~ [-0.37796, 1]
    # mean: ([1/2 + 1/(2 sqrt 7), 1/2 - 1/(2 sqrt 7)] + [-1/sqrt 7, 1]) / 2 = [1/4 - 1/(4 sqrt 7), 3/4 - 1/(4 sqrt 7)]
    expected = torch.tensor([0.25 - 1 / (4 * math.sqrt(7)), 0.75 - 1 / (4 * math.sqrt(7))])  # ~ [0.15551, 0.65551]
    assert torch.allclose((g1_prime + g2_prime) / 2, expected.double(), atol=1e-12)
    assert torch.allclose(out, expected, atol=1e-6)

    assert torch.allclose(mitigator.targets[:, :, 0], torch.tensor([[0.0, t], [t, 0.0]]), atol=1e-6)
    assert torch.allclose(mitigator.last_cosine[0, 1], torch.tensor(w), atol=1e-6)
    assert mitigator.last_cosine[0, 0].isnan().all()
    # both pairs corrected; |out - mean| / |mean| with mean = [0, 1/2]: sqrt(2) (1/4 - 1/(4 sqrt 7)) / (1/2)
    change = 2 * math.sqrt(2) * (0.25 - 1 / (4 * math.sqrt(7)))
    assert mitigator.summary() == pytest.approx(
        {
            "cos_0_1": w,
            "cos_1_0": w,
            "target_0_1": t,
            "target_1_0": t,
            "acted_0_1": 1.0,
            "acted_1_0": 1.0,
            "change": change,
        }
    )
    assert mitigator.step == 1
    # Law of Sines: right after a correction the cosine equals the target.
    assert _cos(g1_prime, g2.double()) == pytest.approx(t, abs=1e-12)
    assert _cos(g2_prime, g1.double()) == pytest.approx(t, abs=1e-12)


def test_corrected_cosine_matches_target():
    # asymmetric loaded targets: only g'_1 is corrected, so g'_1 = 2 * out - g_2 can be read from the output.
    g1, g2 = torch.tensor([1.0, 0.0, 0.5]), torch.tensor([-1.0, 1.0, 0.2])
    mitigator = GradMitigator(num_tasks=2, beta=0.5)
    targets = torch.tensor([[[0.0], [0.9]], [[-0.99], [0.0]]])
    mitigator.load_state_dict({"num_tasks": 2, "granularity": "parameter", "step": 0, "targets": targets})
    (out,) = mitigator.combine([[g1], [g2]])
    t = mitigator.targets
    w = _cos(g1, g2)
    assert float(t[0, 1]) == pytest.approx(0.5 * 0.9 + 0.5 * w) and float(t[0, 1]) > w  # corrected
    assert float(t[1, 0]) == pytest.approx(0.5 * -0.99 + 0.5 * w) and float(t[1, 0]) < w  # not corrected
    g1_prime = 2 * out - g2
    assert _cos(g1_prime, g2) == pytest.approx(float(t[0, 1]), abs=1e-5)


@pytest.mark.parametrize("min_target", [None, 0.0])
@pytest.mark.parametrize("granularity", ["parameter", "global"])
def test_matches_the_literal_algorithm_1(granularity, min_target):
    """The vectorised GradMitigator against gcl_monai.gradients.algorithm1 (the paper's loop, run in float64)."""
    gen = torch.Generator().manual_seed(0)
    num_tasks, beta = 3, 0.3
    mitigator = GradMitigator(num_tasks=num_tasks, beta=beta, granularity=granularity, min_target=min_target)
    num_segments = 1 if granularity == "global" else len(SHAPES)
    ref_targets = torch.zeros(num_tasks, num_tasks, num_segments, dtype=torch.float64)
    acted = 0
    for _ in range(4):
        grads = _random_grads(num_tasks, SHAPES, gen)
        grads[1] = [g + 0.5 * h for g, h in zip(grads[1], grads[0])]  # some agreement
        grads[2] = [g - 0.8 * h for g, h in zip(grads[2], grads[0])]  # some conflict
        out = mitigator.combine(grads)
        expected = algorithm1(
            [[g.double() for g in task] for task in grads], ref_targets, beta, granularity, 1e-12, min_target
        )
        for o, e, s in zip(out, expected, SHAPES):
            assert o.shape == s and o.dtype == torch.float32
            assert torch.allclose(o.double(), e, atol=1e-5, rtol=1e-5)
        assert torch.allclose(mitigator.targets.double(), ref_targets, atol=1e-5)
        acted += int(mitigator.last_acted.sum())
    assert acted > 0  # the comparison covers corrections, not only the plain mean
    assert mitigator.targets.shape == (num_tasks, num_tasks, num_segments)


def test_global_equals_parameter_for_single_tensor():
    gen = torch.Generator().manual_seed(1)
    per_param, whole = GradMitigator(3, beta=0.2), GradMitigator(3, beta=0.2, granularity="global")
    for _ in range(3):
        grads = _random_grads(3, [(6, 5)], gen)
        assert torch.equal(per_param.combine(grads)[0], whole.combine(grads)[0])
    assert torch.equal(per_param.targets, whole.targets)


def test_zero_gradient():
    gen = torch.Generator().manual_seed(2)
    grads = _random_grads(2, SHAPES, gen)
    grads[1][0] = torch.zeros(SHAPES[0])
    mitigator = GradMitigator(2, beta=0.5)
    out = mitigator.combine(grads)
    assert all(o.isfinite().all() for o in out)
    # undefined cosine for parameter 0: no target update, no correction, NaN cosine
    assert torch.equal(mitigator.targets[:, :, 0], torch.zeros(2, 2))
    assert mitigator.last_cosine[:, :, 0].isnan().all()
    assert torch.equal(out[0], grads[0][0] / 2)
    assert mitigator.last_cosine[0, 1, 1:].isfinite().all()
    # all-zero gradients: output zero, summary cosine NaN (undefined everywhere), targets unchanged
    zero = GradMitigator(2)
    out = zero.combine([[torch.zeros(3)], [torch.zeros(3)]])
    assert torch.equal(out[0], torch.zeros(3))
    assert math.isnan(zero.summary()["cos_0_1"]) and zero.summary()["target_0_1"] == 0.0


@pytest.mark.parametrize("granularity", ["parameter", "global"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_gradient(granularity, bad):
    gen = torch.Generator().manual_seed(3)
    grads = _random_grads(3, SHAPES, gen)
    clean = [[g.clone() for g in task] for task in grads]
    grads[1][2][0, 1, 0] = bad
    clean[1][2] = torch.zeros(SHAPES[2])
    mitigator, ref = GradMitigator(3, granularity=granularity), GradMitigator(3, granularity=granularity)
    with pytest.warns(RuntimeWarning, match=r"task 1 has non-finite entries in parameter\(s\) \[2\]"):
        out = mitigator.combine(grads)
    assert all(o.isfinite().all() for o in out)
    for o, e in zip(out, ref.combine(clean)):
        assert torch.allclose(o, e, atol=1e-6)
    assert mitigator.targets.isfinite().all()


def test_targets_near_plus_minus_one_and_opposite_gradients():
    for value in (1.0, -1.0, 1 - 1e-9, -1 + 1e-9):
        mitigator = GradMitigator(2, beta=0.01)
        targets = torch.full((2, 2, 2), value)
        mitigator.load_state_dict({"num_tasks": 2, "granularity": "parameter", "step": 7, "targets": targets})
        grads = [
            [torch.tensor([1.0, 0.0]), torch.tensor([1.0, 2.0])],
            [torch.tensor([-1.0, 1.0]), torch.tensor([1.0, 2.0])],
        ]
        out = mitigator.combine(grads)
        assert all(o.isfinite().all() for o in out) and mitigator.targets.isfinite().all()
        assert mitigator.step == 8
    # exactly opposite gradients (w = -1): the correction cancels each g'_i, output zero (finite)
    (out,) = GradMitigator(2).combine([[torch.tensor([1.0, 2.0])], [torch.tensor([-2.0, -4.0])]])
    assert torch.allclose(out, torch.zeros(2), atol=1e-5)
    # finite entries whose squared norm overflows: cosine undefined, gradients averaged unchanged
    huge = [[torch.tensor([3e38, 1.0])], [torch.tensor([-3e38, 1.0])]]
    mitigator = GradMitigator(2)
    (out,) = mitigator.combine(huge)
    assert torch.equal(out, torch.tensor([0.0, 1.0])) and torch.equal(mitigator.targets, torch.zeros(2, 2, 1))


def test_dtype_and_shapes_preserved():
    gen = torch.Generator().manual_seed(4)
    grads = _random_grads(2, SHAPES, gen, dtype=torch.float16)
    mitigator = GradMitigator(2)
    out = mitigator.combine(grads)
    assert [o.shape for o in out] == [torch.Size(s) for s in SHAPES]
    assert all(o.dtype == torch.float16 for o in out)
    assert mitigator.targets.dtype == torch.float32
    grads64 = _random_grads(2, SHAPES, gen, dtype=torch.float64)
    assert all(o.dtype == torch.float64 for o in GradMitigator(2).combine(grads64))
    # a single task is passed through; an empty parameter tensor is allowed
    single = _random_grads(1, SHAPES, gen)
    assert all(torch.equal(o, g) for o, g in zip(GradMitigator(1).combine(single), single[0]))
    with_empty = [[torch.randn(3, generator=gen), torch.zeros(0)] for _ in range(2)]
    out = GradMitigator(2).combine(with_empty)
    assert out[1].shape == (0,) and out[0].isfinite().all()


def test_state_dict_round_trip():
    gen = torch.Generator().manual_seed(5)
    steps = [_random_grads(3, SHAPES, gen) for _ in range(5)]
    full = GradMitigator(3, beta=0.2)
    for grads in steps:
        full_out = full.combine(grads)
    partial = GradMitigator(3, beta=0.2)
    for grads in steps[:3]:
        partial.combine(grads)
    buffer = io.BytesIO()
    torch.save(partial.state_dict(), buffer)
    buffer.seek(0)
    resumed = GradMitigator(3, beta=0.2)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.step == 3
    assert resumed.summary().keys() == {f"target_{i}_{j}" for i in range(3) for j in range(3) if i != j}
    for grads in steps[3:]:
        resumed_out = resumed.combine(grads)
    assert resumed.step == full.step == 5
    assert torch.equal(resumed.targets, full.targets)
    assert all(torch.equal(a, b) for a, b in zip(resumed_out, full_out))
    # a state saved before the first combine
    fresh = GradMitigator(3)
    fresh.load_state_dict(GradMitigator(3).state_dict())
    assert fresh.targets is None and fresh.step == 0 and fresh.summary() == {}


def test_state_dict_mismatch_errors():
    state = GradMitigator(2).state_dict()
    with pytest.raises(ValueError, match="num_tasks=2"):
        GradMitigator(3).load_state_dict(state)
    with pytest.raises(ValueError, match="granularity='parameter'"):
        GradMitigator(2, granularity="global").load_state_dict(state)
    with pytest.raises(KeyError):
        GradMitigator(2).load_state_dict({"num_tasks": 2})
    with pytest.raises(ValueError, match="shape"):
        GradMitigator(2).load_state_dict({**state, "targets": torch.zeros(3, 3, 4)})
    with pytest.raises(ValueError, match="shape"):
        GradMitigator(2, granularity="global").load_state_dict(
            {**state, "granularity": "global", "targets": torch.zeros(2, 2, 4)}
        )
    with pytest.raises(ValueError, match="finite"):
        GradMitigator(2).load_state_dict({**state, "targets": torch.full((2, 2, 1), float("nan"))})
    # number of parameters validated at the next combine, naming both counts
    loaded = GradMitigator(2)
    loaded.load_state_dict({**state, "targets": torch.zeros(2, 2, 4)})
    with pytest.raises(ValueError, match=r"for 4 parameter\(s\).*received 5"):
        loaded.combine(_random_grads(2, SHAPES, torch.Generator().manual_seed(6)))
    # a parameter list that changes between calls
    mitigator = GradMitigator(2)
    mitigator.combine(_random_grads(2, SHAPES, torch.Generator().manual_seed(7)))
    with pytest.raises(ValueError, match=r"for 5 parameter\(s\).*received 2"):
        mitigator.combine(_random_grads(2, SHAPES[:2], torch.Generator().manual_seed(8)))


def test_invalid_arguments_and_inputs():
    with pytest.raises(ValueError):
        GradMitigator(0)
    with pytest.raises(ValueError):
        GradMitigator(2, beta=1.5)
    with pytest.raises(ValueError):
        GradMitigator(2, granularity="layer")
    with pytest.raises(ValueError):
        GradMitigator(2, eps=-1.0)
    mitigator = GradMitigator(2)
    with pytest.raises(ValueError, match="2 task"):
        mitigator.combine([[torch.ones(2)]])
    with pytest.raises(ValueError, match="task 1, parameter 0 has shape"):
        mitigator.combine([[torch.ones(2)], [torch.ones(3)]])
    with pytest.raises(TypeError):
        mitigator.combine([[torch.ones(2)], [None]])


def _persistent_conflict(mitigator: GradMitigator, steps: int):
    """The same two conflicting gradients (cosine -0.287) at every step; returns the last output."""
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-0.3, 1.0])
    for _ in range(steps):
        (out,) = mitigator.combine([[g1], [g2]])
    return g1, g2, out


def test_persistent_conflict_fades_under_the_paper_rule():
    # Algorithm 1 as written: the EMA target follows the (constant, negative) cosine, so the correction of
    # Eq. (3) shrinks as (1 - beta)^t and the update returns to the plain mean: the conflict is not mitigated.
    mitigator = GradMitigator(num_tasks=2, beta=0.01)
    g1, g2, out = _persistent_conflict(mitigator, 1)
    w = _cos(g1, g2)
    assert w < -0.28
    assert mitigator.summary()["change"] > 0.25  # first step: target 0.01 * w, nearly orthogonalised
    g1, g2, out = _persistent_conflict(mitigator, 1500)
    assert float(mitigator.targets[0, 1]) == pytest.approx(w, abs=1e-5)
    assert torch.allclose(out, (g1 + g2) / 2, atol=1e-5)
    assert mitigator.summary()["change"] < 1e-4


def test_min_target_mitigates_a_persistent_conflict():
    # with a floor of 0 the target never follows the conflict below orthogonality: Eq. (3) with t = 0 gives
    # mu = -(g_i . g_j) / |g_j|^2, i.e. each gradient loses its component along the other, at every step.
    mitigator = GradMitigator(num_tasks=2, beta=0.01, min_target=0.0)
    g1, g2, out = _persistent_conflict(mitigator, 1500)
    dot = float(g1 @ g2)
    expected = (g1 - dot / float(g2 @ g2) * g2 + g2 - dot / float(g1 @ g1) * g1) / 2
    assert torch.allclose(out, expected, atol=1e-5)
    assert float(mitigator.targets[0, 1]) == pytest.approx(_cos(g1, g2), abs=1e-5)  # the EMA is still Eq. (4)
    summary = mitigator.summary()
    assert summary["acted_0_1"] == 1.0 and summary["acted_1_0"] == 1.0
    assert summary["change"] == pytest.approx(float((out - (g1 + g2) / 2).norm() / ((g1 + g2) / 2).norm()), rel=1e-4)
    # agreeing gradients above the floor: the paper's adaptive rule applies unchanged
    agree = GradMitigator(num_tasks=2, beta=0.3, min_target=0.0)
    paper = GradMitigator(num_tasks=2, beta=0.3)
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        a = torch.randn(6, generator=gen)
        grads = [[a], [a + 0.3 * torch.randn(6, generator=gen)]]
        assert torch.allclose(agree.combine(grads)[0], paper.combine(grads)[0])


def test_min_target_out_of_range():
    with pytest.raises(ValueError, match="min_target"):
        GradMitigator(num_tasks=2, min_target=1.5)


@pytest.mark.parametrize("granularity", ["parameter", "global"])
def test_combine_never_reads_the_device(granularity):
    # on the meta device every read of a value on the host raises: combine and summary(as_tensors=True) queue
    # work only (no .item(), no branch on a tensor value), which is what keeps an accelerator busy
    grads = [[torch.empty(s, device="meta") for s in SHAPES] for _ in range(3)]
    mitigator = GradMitigator(3, granularity=granularity, min_target=0.0)
    for _ in range(2):
        out = mitigator.combine(grads)
    assert [o.shape for o in out] == [torch.Size(s) for s in SHAPES] and all(o.is_meta for o in out)
    stats = mitigator.summary(as_tensors=True)
    assert len(stats) == 3 * 3 * 2 + 1 and all(v.is_meta and v.ndim == 0 for v in stats.values())


def test_summary_as_tensors_equals_summary():
    gen = torch.Generator().manual_seed(6)
    mitigator = GradMitigator(3, beta=0.2)
    assert mitigator.summary(as_tensors=True) == {}
    grads = _random_grads(3, SHAPES, gen)
    grads[2] = [g - 0.8 * h for g, h in zip(grads[2], grads[0])]
    grads[1][0] = torch.zeros(SHAPES[0])  # an undefined cosine: nanmean ignores it
    mitigator.combine(grads)
    floats, tensors = mitigator.summary(), mitigator.summary(as_tensors=True)
    assert floats.keys() == tensors.keys() and 0 < floats["change"]
    assert all(isinstance(v, float) for v in floats.values())
    assert all(float(tensors[k]) == v for k, v in floats.items())
    acted = mitigator.last_acted.float().mean(-1)
    assert floats["acted_2_0"] == pytest.approx(float(acted[2, 0])) and floats["acted_0_2"] == pytest.approx(
        float(acted[0, 2])
    )
    assert floats["cos_0_1"] == pytest.approx(float(torch.nanmean(mitigator.last_cosine[0, 1])))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_combine_without_synchronisation():
    gen = torch.Generator().manual_seed(7)
    grads = [[g.cuda() for g in task] for task in _random_grads(3, SHAPES, gen)]
    cpu, gpu = GradMitigator(3, beta=0.3), GradMitigator(3, beta=0.3)
    gpu.combine(grads)  # first call: layout and state set-up
    torch.cuda.synchronize()
    bad = [[g.clone() for g in task] for task in grads]
    bad[1][2][0, 1, 0] = float("nan")
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = gpu.combine(grads)
        gpu.combine(bad)
        stats = gpu.summary(as_tensors=True)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    cpu.combine([[g.cpu() for g in task] for task in grads])
    expected = cpu.combine([[g.cpu() for g in task] for task in grads])
    assert all(torch.allclose(o.cpu(), e, atol=1e-6) for o, e in zip(out, expected))
    assert stats["change"].is_cuda
    with pytest.warns(RuntimeWarning, match=r"task 1 has non-finite entries in parameter\(s\) \[2\]"):
        gpu.summary()
