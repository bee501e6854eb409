"""The learning rate of the pre-trained encoder in fine-tuning."""

from __future__ import annotations

__all__ = ["encoder_learning_rate"]


def encoder_learning_rate(lr: float, encoder_lr_scale: float, init: str) -> float | None:
    """
    The fine-tuning learning rate of the encoder, ``lr * encoder_lr_scale``, for
    :py:func:`gcl_monai.networks.trainable_parameters`; None (the optimiser's own ``lr`` for every parameter, one
    parameter group) when the scale is 1 or the encoder starts from random weights (``init`` ``"random"``).
    """
    if init == "random" or encoder_lr_scale == 1:
        return None
    return lr * encoder_lr_scale
