"""The options of a bundle run that are checked or applied before it starts: its on/off switches and torch's
float32 matrix-product precision."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger("gcl_monai.bundle")

__all__ = ["MATMUL_PRECISIONS", "check_switches", "set_float32_matmul_precision"]

#: the values of ``torch.set_float32_matmul_precision``.
MATMUL_PRECISIONS = ("highest", "high", "medium")


def check_switches(**switches: object) -> None:
    """
    Refuses an on/off switch of a bundle that is not a boolean. ``python -m monai.bundle run ... --pixel_branch
    false`` passes the string ``"false"``, which Python reads as true: without this check the switch would be
    silently on.

    Raises:
        ValueError: naming each switch whose value is not ``True`` or ``False``.
    """
    bad = {name: value for name, value in switches.items() if not isinstance(value, bool)}
    if bad:
        shown = ", ".join(f"{name}={value!r}" for name, value in bad.items())
        raise ValueError(
            f"on/off switches must be True or False, got {shown}; on the command line write e.g. "
            f"--{next(iter(bad))} False (capitalised, a Python literal)."
        )


def set_float32_matmul_precision(precision: str) -> None:
    """
    ``torch.set_float32_matmul_precision(precision)`` for a bundle run (pre-training's ``float32_matmul_precision``),
    refusing a value that torch would only warn about and ignore.

    ``highest`` (torch's default) computes float32 matrix products in float32. ``high`` lets CUDA use TF32 (about
    1e-3 relative precision); ``medium`` also lets CUDA, and oneDNN on CPUs with bfloat16 instructions, use
    bfloat16-based products. On the AVX-512 BF16 CPU of docs/results/speed.md, ``medium`` computed GradFilter's
    products within 4e-7 (relative) of ``highest`` and about 1.4 times faster. Convolutions are not affected.

    Raises:
        ValueError: naming a value that is not one of :data:`MATMUL_PRECISIONS`.
    """
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"float32_matmul_precision must be one of {list(MATMUL_PRECISIONS)}, got {precision!r}.")
    torch.set_float32_matmul_precision(precision)
    logger.info("float32 matrix products at precision %r (torch.set_float32_matmul_precision).", precision)
