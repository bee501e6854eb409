"""The combiners' common base (gcl_monai.gradients.combiner): GradientLayout packs per-parameter gradients into blocks
of BLOCK_SIZE, each block one parameter's, and back; segment sums per parameter or over all; GradientCombiner
validates the gradients and keeps one layout per shapes, device and dtype."""

import pytest
import torch

from gcl_monai.gradients import MeanCombiner
from gcl_monai.gradients.combiner import BLOCK_SIZE, GradientLayout

SHAPES = [torch.Size([2, 150]), torch.Size([3]), torch.Size([BLOCK_SIZE])]  # 300, 3 and 256 elements


def _grads(num_tasks, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(s, generator=g).to(dtype) for s in SHAPES] for _ in range(num_tasks)]


def test_a_parameter_fills_whole_blocks_zero_padded():
    layout = GradientLayout(SHAPES, torch.device("cpu"), torch.float32, per_parameter=True)
    # 300 elements take 2 blocks, 3 one, 256 exactly one
    assert layout.num_blocks == 4 and layout.param_ids.tolist() == [0, 0, 1, 2] and layout.num_segments == 3
    grads = _grads(2)
    packed = layout.pack(grads)
    assert packed.shape == (2, 4, BLOCK_SIZE)
    flat = packed[1].reshape(-1)
    assert torch.equal(flat[:300], grads[1][0].reshape(-1)) and not flat[300:512].any()  # padded with zeros
    assert torch.equal(flat[512:515], grads[1][1]) and not flat[515:768].any()
    assert torch.equal(flat[768:], grads[1][2])
    back = layout.unpack(packed[1], grads[1])
    assert [b.shape for b in back] == SHAPES and all(torch.equal(b, g) for b, g in zip(back, grads[1]))
    # per-parameter reductions through the blocks: squared norms by hand
    norms = layout.segment_sum(packed.pow(2).sum(-1))
    expected = torch.tensor([[float(g.pow(2).sum()) for g in task] for task in grads])
    torch.testing.assert_close(norms, expected)
    whole = GradientLayout(SHAPES, torch.device("cpu"), torch.float32, per_parameter=False)
    assert whole.num_segments == 1 and whole.block_ids.tolist() == [0, 0, 0, 0]
    torch.testing.assert_close(whole.segment_sum(packed.pow(2).sum(-1)), expected.sum(1, keepdim=True))
    torch.testing.assert_close(whole.segment_sum(packed.pow(2).sum(-1), per_parameter=True), expected)


def test_the_buffer_is_reused_and_unpacking_restores_each_dtype():
    layout = GradientLayout(SHAPES, torch.device("cpu"), torch.float64, per_parameter=True)
    first = layout.pack(_grads(2))
    second = layout.pack(_grads(2, torch.float16))
    assert second.data_ptr() == first.data_ptr() and second.dtype == torch.float64  # overwritten, not reallocated
    assert layout.pack(_grads(3)).shape == (3, 4, BLOCK_SIZE)  # another number of tasks: a buffer of its size
    like = [torch.zeros(s, dtype=d) for s, d in zip(SHAPES, (torch.float16, torch.float32, torch.float64))]
    out = layout.unpack(layout.pack(_grads(1))[0], like)
    assert [o.dtype for o in out] == [torch.float16, torch.float32, torch.float64]


def test_the_combiner_validates_the_gradients_and_caches_its_layout():
    combiner = MeanCombiner(2)
    grads = _grads(2)
    combiner.combine(grads)
    layout = combiner._layout
    combiner.combine(_grads(2))
    assert combiner._layout is layout  # the same shapes: the same layout
    combiner.combine([[g.double() for g in task] for task in grads])
    assert combiner._layout is not layout and combiner._layout.dtype == torch.float64
    mixed = [[grads[0][0].half(), *grads[0][1:]], grads[1]]
    assert combiner.combine(mixed)[0].dtype == torch.float16 and combiner._layout.dtype == torch.float32
    with pytest.raises(ValueError, match="expected gradients of 2 task"):
        combiner.combine(grads[:1])
    with pytest.raises(ValueError, match="the gradient list of task 0 is empty"):
        combiner.combine([[], []])
    with pytest.raises(ValueError, match=r"task 1 has 2 gradient tensor\(s\), task 0 has 3"):
        combiner.combine([grads[0], grads[1][:2]])
    with pytest.raises(TypeError, match="task 1, parameter 1 must be a floating point tensor"):
        combiner.combine([grads[0], [grads[1][0], torch.ones(3, dtype=torch.long), grads[1][2]]])
    with pytest.raises(ValueError, match="num_tasks must be at least 1"):
        MeanCombiner(0)
    with pytest.raises(KeyError):
        combiner.load_state_dict({})
