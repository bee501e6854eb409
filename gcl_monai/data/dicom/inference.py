"""The inference cases of a DICOM folder: one case per 3D volume of the index, its slices linked into a folder of
their own that MONAI's DICOM reader reads as one series; the stacks the index rejects are cases marked skipped."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

from gcl_monai.data.dicom.index import DicomVolume, index_dicom

logger = logging.getLogger("gcl_monai.data")

__all__ = ["dicom_inference_cases"]

SKIPPED_KEY = "skipped"
"""Key of a case that cannot be segmented; its value is the reason (see ``gcl_monai.engines.segment_each_case``)."""


def _case_name(volume: DicomVolume) -> str:
    numbers = sorted({str(h.get("SeriesNumber")) for h in volume.headers})
    series = numbers[0] if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}"
    phase = "" if volume.trigger_time is None else f"_t{volume.trigger_time:.0f}ms"
    name = f"{volume.patient}_series{series}{phase}_{volume.volume_id[:6]}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def dicom_inference_cases(folder: str | Path, staging_dir: str | Path | None = None) -> list[dict]:
    """One inference case per 3D volume of the DICOM files under ``folder``.

    Each volume's slices are symbolic links in ``<staging_dir>/<case name>/`` (the case name tells the patient,
    series number, trigger time and a hash of the slices), read as one series by
    :class:`~gcl_monai.transforms.PositionSortedPydicomReader`; the written label maps take that name. A stack the
    index rejects (missing slice, mixed geometry, duplicate positions) becomes a case with ``"skipped"`` set to the
    reason, so that the inference names it and fails at the end.

    Args:
        folder: the DICOM folder (any nesting, any file names).
        staging_dir: where the case folders go (default: a new temporary folder).

    Returns:
        ``{"image": case folder, "case": name}`` per volume, then ``{"image": first file, "case": series,
        "skipped": reason}`` per rejected stack.
    """
    index = index_dicom(folder)
    staging = Path(staging_dir) if staging_dir is not None else Path(tempfile.mkdtemp(prefix="gcl_dicom_cases_"))
    cases = []
    for volume in index.volumes:
        name = _case_name(volume)
        case_dir = staging / name
        case_dir.mkdir(parents=True, exist_ok=True)
        for number, file in enumerate(volume.files):
            link = case_dir / f"{number:04d}.dcm"
            if link.is_symlink():  # a case folder of an earlier run: its files may have moved since
                link.unlink()
            os.symlink(os.path.abspath(file), link)
        cases.append({"image": str(case_dir), "case": name})
    for skipped in index.skipped:
        if skipped.series:  # files that are not images at all (radiographs, DICOMDIR) are no cases
            cases.append(
                {"image": skipped.files[0], "case": f"series {', '.join(skipped.series)}", SKIPPED_KEY: skipped.reason}
            )
    logger.info(
        "%s: %d DICOM volume(s) to segment (slices linked in %s), %d stack(s) that cannot be.",
        folder,
        len(index.volumes),
        staging,
        len(cases) - len(index.volumes),
    )
    return cases
