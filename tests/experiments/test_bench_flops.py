"""The FLOP count of the speed benchmark: GradFilter's share checked against a hand count of its products."""

from __future__ import annotations

import argparse
import math

from benchmarks.bench_pretrain_iteration import count_flops


def _args(**overrides):
    args = argparse.Namespace(
        batch_size=2,
        image_size=32,
        features=[4, 4, 4, 4, 8, 4],
        norm="batch",
        max_positive_images=4,
        grad_filter_block_elements=None,
    )
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_grad_filter_flops_equal_a_hand_count_of_its_products():
    args = _args()
    result = count_flops("pixcl_gradfilter", args, "cpu")
    n_img = 2 * args.batch_size  # both views
    pairs = n_img  # no meta label: each image's positive is its other view only
    hw = (args.image_size // 16) ** 2  # 2 x 2 pixels at the encoder's output
    k = max(1, min(hw - 1, math.ceil(0.3 * hw)))  # the pool: Top-K of the positive image's pixels
    c = hidden = args.features[4]  # the last layer's channels; the pixel head's hidden width is the same
    d = 128  # the pixel embedding
    jacobian = 2 * n_img * hw * (d * hidden + c * hidden + 9 * c)  # W_2^T u, the hidden ReLU mask, ||x_patch||
    magnitudes = (
        2
        * pairs
        * hw
        * (
            hw * d  # the softmax-weighted negatives' mean, for u . ubar^-
            + hw * hidden  # W_2^T ubar^-
            + k * hidden * c  # s * W_1^T (r * (W_2^T u^+ - W_2^T ubar^- - d W_2^T u)) of every positive
        )
    )
    assert result["grad_filter_flops"] == jacobian + magnitudes
    assert 0.0 < result["grad_filter_flop_share"] < 1.0
    assert result["grad_filter_flop_share"] == result["grad_filter_flops"] / result["flops"]


def test_variants_without_grad_filter_spend_no_flops_in_it_and_more_meta_labels_cost_more():
    args = _args()
    simclr = count_flops("simclr", args, "cpu")
    multi = count_flops("multi_meta_sum", args, "cpu")
    assert simclr["grad_filter_flops"] == multi["grad_filter_flops"] == 0
    assert multi["flops"] > 2 * simclr["flops"]  # one backward pass per meta label, one forward
