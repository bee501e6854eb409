"""Seeded random generators, one per device, for the transforms that draw their parameters on the batch's device."""

from __future__ import annotations

import torch

__all__ = ["DeviceGenerators"]


class DeviceGenerators:
    """
    A ``torch.Generator`` per device, each seeded with ``seed`` when first asked for, so that a batch transform draws
    the same stream on whichever device its batch lives; with ``seed=None`` it hands out None, and the draws come
    from torch's default generator of the device (seeded by ``torch.manual_seed``, hence
    ``monai.utils.set_determinism``).

    Args:
        seed: the seed of every device's generator; None for torch's default generators.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def __call__(self, device: torch.device) -> torch.Generator | None:
        """The generator of ``device`` (None when no seed was given)."""
        if self.seed is None:
            return None
        device = torch.device(device)
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[device]
