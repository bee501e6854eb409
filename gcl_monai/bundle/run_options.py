"""The options of a bundle run that are checked or applied before it starts: its on/off switches (the component a
switch turns off, the one it leaves, the training output a switch shapes), the configs it stacks and torch's float32
matrix-product precision."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

import torch

logger = logging.getLogger("gcl_monai.bundle")

T = TypeVar("T")

__all__ = [
    "MATMUL_PRECISIONS",
    "check_choice",
    "check_overlay",
    "check_resume",
    "check_switches",
    "first_enabled",
    "if_enabled",
    "set_float32_matmul_precision",
    "training_loss",
]

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


def check_choice(name: str, value: object, choices: Sequence) -> None:
    """
    Refuses a bundle setting whose value is not one of its ``choices``, naming the setting, before any
    component that reads it is built (a value that selects steps with ``_disabled_`` would otherwise be read as
    none of them, silently).

    Raises:
        ValueError: ``value`` is not in ``choices``.
    """
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}.")


def check_resume(resume: bool, semi_supervised: str | None) -> None:
    """
    Refuses ``resume`` for a semi-supervised fine-tuning: the trainer's checkpoint holds the network, optimiser,
    schedule, engine state and the best-model tracking, not the switches' EMA teacher or the position in the
    unlabelled stream, so such a run would not continue as it would have uninterrupted.

    Raises:
        ValueError: ``resume`` is on and ``semi_supervised`` names a switch.
    """
    if resume and semi_supervised is not None:
        raise ValueError(
            f"resume=True is not available with semi_supervised={semi_supervised!r}: its teacher and unlabelled "
            "stream are not checkpointed; run it afresh (resume False)."
        )


def check_overlay(config_files: Sequence[str], overlay: str, base: str) -> None:
    """
    Refuses a run of an overlay config without the config it lies on: ``evaluate.json`` holds only what the
    evaluation adds to ``train.json`` (as the model-zoo's bundles write it) and runs as
    ``--config_file "['configs/train.json','configs/evaluate.json']"``. Each config names itself in ``config_files``
    (``train.json`` sets the list, the overlay appends to it with MONAI's ``+`` merge key), so that the overlay run
    alone stops here, with this message, instead of at the first key it reads from ``train.json``.

    Raises:
        ValueError: ``base`` is not among ``config_files``; the message gives the command that stacks both.
    """
    if base not in config_files:
        raise ValueError(
            f"{overlay} is an overlay on {base}: run both, {base} first, e.g. --config_file "
            f"\"['configs/{base}','configs/{overlay}']\" (this run loaded {list(config_files)})."
        )


def if_enabled(component: T, enabled: bool) -> T | None:
    """
    ``component`` when its switch is on, None when it is off: for an argument that takes None for "none of it",
    where the component itself must exist either way (pre-training's GradFilter is checkpointed whether or not
    the trainer filters with it).
    """
    return component if enabled else None


def first_enabled(*components: T | None) -> T:
    """
    The first of ``components`` that a switch left on (not None): e.g. the training's loader or, with
    ``data_on_device``, its batches drawn on the device, each the other's ``_disabled_``.

    Raises:
        ValueError: every component is switched off.
    """
    for component in components:
        if component is not None:
            return component
    raise ValueError(f"all {len(components)} components are switched off (_disabled_); one must be on.")


def training_loss(output: dict | list[dict]) -> torch.Tensor:
    """
    The loss of a trainer's iteration output, decollated (a list of per-item dicts, each holding the batch's loss:
    MONAI's default) or not (the batch's dict: ``decollate`` False): for the loss handlers' ``output_transform``.
    """
    return (output[0] if isinstance(output, list) else output)["loss"]


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
