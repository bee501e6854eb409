"""A hand-made trajectory of recorded pre-training scalars, shared by the tests of the summary and the comparison."""

import math

CHANCE = math.log(31)  # batch of 16 images, two views


def _rows(n=10, std_end=0.03):
    rows = []
    for t in range(n):
        rows.append(
            {
                "iteration": t + 1.0,
                "batch_size": 16.0,
                "img/a": 3.5 - 0.05 * t,  # 3.50 .. 3.05
                "img/b": CHANCE + 0.001 * (t % 2),  # stays at chance
                "pix/a": 2.0,
                "pix/b": 1.0 - 0.1 * t,
                "std/img": 0.02 + (std_end - 0.02) * t / (n - 1),
                "cos/img": 0.9 - 0.05 * t,
                "cos_0_1": -0.3,
                "cos_1_0": -0.3 if t < n - 1 else -0.1,
                "target_0_1": -0.01 * t,
                "target_1_0": -0.02 * t,
                "acted_0_1": 1.0 if t % 2 else 0.0,
                "acted_1_0": 0.5,
                "change": 0.1,
            }
        )
    return rows
