"""The probe's labelled volumes, loaded once with the bundle's evaluation transforms, and its patient folds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from gcl_monai.probe.linear import ProbeVolume

__all__ = ["load_probe_volumes", "patient_folds", "patient_groups"]


def _patient(item: dict) -> str:
    return str(item.get("patient", item.get("patient_id")))


def load_probe_volumes(datalist: Sequence[dict], transform: Callable, slice_axis: int = -1) -> list[ProbeVolume]:
    """
    Loads each labelled volume of ``datalist`` with ``transform`` (the bundle's ``volume_eval_transforms``: the
    field of view and ``image_size`` the network sees) as a :py:class:`ProbeVolume`.

    Raises:
        ValueError: an entry without a ``label``, naming its image.
    """
    volumes = []
    for item in datalist:
        if "label" not in item:
            raise ValueError(f"the probe needs labelled volumes; {item.get('image')!r} has no 'label'.")
        data = transform(dict(item))
        image = torch.as_tensor(data["image"]).movedim(slice_axis, 1)[0]  # (Z, H, W)
        label = torch.as_tensor(data["label"]).movedim(slice_axis, 1)[0]
        volumes.append(
            ProbeVolume(
                patient=_patient(item),
                name=Path(str(item["image"]).split("::")[0]).name,
                image=image[:, None].float().contiguous(),
                label=label.round().long().contiguous(),
            )
        )
    return volumes


def patient_folds(
    volumes: Sequence[ProbeVolume], folds: int, seed: int = 0, groups: dict[str, str] | None = None
) -> list[list[str]]:
    """
    ``folds`` disjoint groups of the volumes' patients for cross-validation: a seeded permutation, ordered by
    ``groups`` (e.g. ACDC's pathology) when given, then dealt round-robin, so each fold holds every group in
    proportion.

    Raises:
        ValueError: fewer than two folds, or fewer patients than folds.
    """
    patients = sorted({v.patient for v in volumes})
    if folds < 2 or len(patients) < folds:
        raise ValueError(f"cross-validation needs 2 <= folds <= patients ({len(patients)}), got folds={folds}.")
    order = [patients[i] for i in np.random.default_rng(seed).permutation(len(patients))]
    if groups:
        order.sort(key=lambda p: str(groups.get(p, "")))
    return [sorted(order[k::folds]) for k in range(folds)]


def patient_groups(datalist: Sequence[dict], key: str | None) -> dict[str, str] | None:
    """``patient -> str(entry[key])`` (e.g. ACDC's pathology ``group``), the strata of :func:`patient_folds`; None
    when ``key`` is None or an entry lacks it."""
    if key is None or any(key not in d for d in datalist):
        return None
    return {_patient(d): str(d[key]) for d in datalist}
