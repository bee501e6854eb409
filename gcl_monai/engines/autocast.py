"""Mixed-precision forward pass for fine-tuning: a MONAI inferer that runs the network under ``torch.autocast``."""

from __future__ import annotations

from typing import Any

import torch
from monai.inferers import SimpleInferer

__all__ = ["AutocastInferer"]


class AutocastInferer(SimpleInferer):
    """
    ``SimpleInferer`` whose forward pass runs under ``torch.autocast(device.type, dtype)`` (bfloat16 by default)
    and returns float32, so that the loss, the metrics and the optimiser step stay in float32: the bfloat16
    mixed precision of MONAI's training workflows (``SupervisedTrainer(amp=True)``), on any device type. MONAI's
    own ``amp`` switch autocasts on CUDA only, with float16 and a ``GradScaler``; bfloat16 has float32's exponent
    range, so no loss scaling is needed.

    Fine-tuning is where mixed precision is safe in this project: GradFilter (pre-training) ranks per-pixel
    gradient magnitudes, and bfloat16 changes which positives it keeps (``docs/results/bf16_autocast_cpu.json``);
    a supervised Dice + cross-entropy step has no such decision. The semi-supervised switches' consistency passes
    call the network themselves and stay in float32.

    Args:
        enabled: False: exactly ``SimpleInferer`` (float32).
        device: the engine's device; its type selects the autocast ("cuda", "cpu").
        dtype: the autocast dtype, a ``torch.dtype`` or its name ("bfloat16", "float16").
    """

    def __init__(self, enabled: bool = True, device: str | torch.device = "cpu", dtype: str | torch.dtype = "bfloat16"):
        super().__init__()
        self.enabled = bool(enabled)
        self.device_type = torch.device(device).type
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(f"AutocastInferer: dtype must be a floating torch dtype, got {dtype!r}.")

    def __call__(self, inputs: torch.Tensor, network: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled:
            return super().__call__(inputs, network, *args, **kwargs)
        with torch.autocast(self.device_type, dtype=self.dtype):
            out = super().__call__(inputs, network, *args, **kwargs)
        return out.float() if isinstance(out, torch.Tensor) else out
