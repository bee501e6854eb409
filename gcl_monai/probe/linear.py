"""
The dense linear probe: a per-pixel multinomial logistic regression (scikit-learn) on a frozen encoder's
multi-scale features, fitted on a class-balanced sample of pixels and scored by the 3D Dice of its prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from monai.metrics import compute_dice
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from gcl_monai.probe.features import FrozenEncoder

__all__ = ["ProbeVolume", "fit_probe", "sample_pixels", "score_probe"]


@dataclass
class ProbeVolume:
    """One labelled volume as the probe sees it: its slices (Z, 1, H, W) and label map (Z, H, W), both in the
    network's grid (the bundle's field of view and ``image_size``)."""

    patient: str
    name: str
    image: torch.Tensor
    label: torch.Tensor


def _grid_labels(label: torch.Tensor, grid: Sequence[int]) -> torch.Tensor:
    """(Z, H, W) label map -> (Z, *grid), nearest neighbour."""
    return F.interpolate(label[:, None].float(), size=tuple(grid), mode="nearest")[:, 0].long()


def sample_pixels(
    volumes: Sequence[ProbeVolume], grid: Sequence[int], num_classes: int, pixels_per_class: int, seed: int
) -> list[np.ndarray]:
    """
    A class-balanced sample of pixels of ``volumes`` in the probe's ``grid``: up to ``pixels_per_class`` pixels of
    each class drawn uniformly without replacement (all of a rarer class), by a generator seeded with ``seed``.

    Returns:
        per volume, the flat indices (into its (Z, *grid) label map) of its sampled pixels, sorted.
    """
    labels = [_grid_labels(v.label, grid).flatten().numpy() for v in volumes]
    offsets = np.cumsum([0] + [len(lab) for lab in labels])
    flat = np.concatenate(labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for c in range(num_classes):
        where = np.flatnonzero(flat == c)
        chosen.append(rng.choice(where, size=min(pixels_per_class, len(where)), replace=False))
    picked = np.sort(np.concatenate(chosen))
    return [picked[(picked >= lo) & (picked < hi)] - lo for lo, hi in zip(offsets[:-1], offsets[1:])]


@torch.no_grad()
def _volume_features(encoder: FrozenEncoder, image: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(Z, 1, H, W) -> (Z * gh * gw, channels) features, slice-major."""
    feats = torch.cat([encoder(batch) for batch in image.split(batch_size)])
    return feats.permute(0, 2, 3, 1).reshape(-1, feats.shape[1])


def fit_probe(
    encoder: FrozenEncoder,
    volumes: Sequence[ProbeVolume],
    num_classes: int,
    pixels_per_class: int = 15000,
    seed: int = 0,
    regularization: float = 1.0,
    max_iter: int = 500,
    batch_size: int = 32,
):
    """
    Fits the dense linear probe: standardised features (``StandardScaler``), then an L2-regularised multinomial
    ``LogisticRegression`` (``C = regularization``, L-BFGS, deterministic) on the pixels of :func:`sample_pixels`.

    Returns:
        the fitted scikit-learn pipeline.

    Raises:
        ValueError: the fit volumes lack a class (its Dice could not be learnt).
    """
    indices = sample_pixels(volumes, encoder.grid, num_classes, pixels_per_class, seed)
    xs, ys = [], []
    for volume, idx in zip(volumes, indices):
        if len(idx):
            xs.append(_volume_features(encoder, volume.image, batch_size)[torch.from_numpy(idx)].numpy())
            ys.append(_grid_labels(volume.label, encoder.grid).flatten().numpy()[idx])
    x, y = np.concatenate(xs), np.concatenate(ys)
    absent = sorted(set(range(num_classes)) - set(np.unique(y).tolist()))
    if absent:
        names = ", ".join(sorted({v.patient for v in volumes}))
        raise ValueError(f"the probe's fit patients ({names}) have no pixel of class {absent}.")
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=regularization, max_iter=max_iter, tol=1e-4))
    return probe.fit(x, y)


def _linear_map(probe) -> tuple[torch.Tensor, torch.Tensor]:
    """The fitted pipeline as one linear map of the raw features: (classes, channels) weights and (classes,) bias
    (a binary logistic regression's one score ``s`` becomes the pair ``(0, s)``)."""
    scaler, logistic = probe[0], probe[-1]
    coef, intercept = logistic.coef_, logistic.intercept_
    if coef.shape[0] == 1:
        coef, intercept = np.concatenate([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
    weight = coef / scaler.scale_[None]
    bias = intercept - weight @ scaler.mean_
    return torch.as_tensor(weight, dtype=torch.float32), torch.as_tensor(bias, dtype=torch.float32)


@torch.no_grad()
def score_probe(
    encoder: FrozenEncoder, probe, volumes: Sequence[ProbeVolume], num_classes: int, batch_size: int = 32
) -> list[dict]:
    """
    The probe's prediction of each volume: class scores in the probe's grid, resized bilinearly to the network's
    grid (a linear probe commutes with the resize), argmax, and the 3D Dice of each foreground class against the
    label (``monai.metrics.compute_dice``; NaN for a class absent from both).

    Returns:
        per volume ``{"patient", "name", "dice_per_class": [...], "dice": mean over the present classes}``.
    """
    weight, bias = _linear_map(probe)
    results = []
    for volume in volumes:
        slices = []
        for batch in volume.image.split(batch_size):
            scores = torch.einsum("kc,bchw->bkhw", weight, encoder(batch)) + bias[None, :, None, None]
            slices.append(F.interpolate(scores, size=batch.shape[-2:], mode="bilinear", align_corners=False))
        pred = torch.cat(slices).argmax(1)  # (Z, H, W)
        one_hot = F.one_hot(pred, num_classes).permute(3, 0, 1, 2)[None].float()
        truth = F.one_hot(volume.label.long(), num_classes).permute(3, 0, 1, 2)[None].float()
        dice = compute_dice(one_hot, truth, include_background=False, ignore_empty=True)[0].tolist()
        present = [d for d in dice if np.isfinite(d)]
        results.append(
            {
                "patient": volume.patient,
                "name": volume.name,
                "dice_per_class": dice,
                "dice": float(np.mean(present)) if present else float("nan"),
            }
        )
    return results
