"""The synthetic cardiac phantom written as a DICOM archive: cine MR short-axis series with realistic headers, in
either of the two layouts scanners export (one series holding every slice and phase, or one series per slice
location), so that the DICOM index, the pre-training bundle and the DICOM SEG output can be tried without a PACS.

Example::

    python -m gcl_monai.data.dicom.phantom_dicom --out /tmp/dicom_phantom --num-patients 4 --layout per_slice
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from gcl_monai.data.acdc import ACDC_GROUPS
from gcl_monai.data.phantom import SLICE_THICKNESS_MM, synthesize_patient

logger = logging.getLogger("gcl_monai.data")

__all__ = ["DICOM_PHANTOM_LAYOUTS", "MR_IMAGE_STORAGE", "short_axis_orientation", "write_phantom_dicom"]

MR_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.4"
"""SOP Class UID of MR Image Storage."""

DICOM_PHANTOM_LAYOUTS = ("single_series", "per_slice")
"""``single_series``: one series per patient holding every slice and phase; ``per_slice``: one series per slice
location holding its phases (stacked across series by study, orientation and trigger time)."""

_SITES = (("Site A", "GCL Phantom Scanner 1.5T", 1.5), ("Site B", "GCL Phantom Scanner 3T", 3.0))


def short_axis_orientation(tilt_degrees: float = 30.0) -> tuple[np.ndarray, np.ndarray]:
    """An oblique, short-axis-like ImageOrientationPatient: the row and column direction cosines (LPS), rounded to 6
    decimals as a scanner writes them.

    Args:
        tilt_degrees: rotation of the plane out of the axial plane about the patient's left-right axis, then
            about its head-foot axis.
    """
    a, b = np.deg2rad(tilt_degrees), np.deg2rad(tilt_degrees / 2)
    about_x = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    about_z = np.array([[np.cos(b), -np.sin(b), 0], [np.sin(b), np.cos(b), 0], [0, 0, 1]])
    rotation = about_z @ about_x
    return np.round(rotation[:, 0], 6), np.round(rotation[:, 1], 6)


def _uid(*parts: object) -> str:
    from pydicom.uid import generate_uid

    return generate_uid(entropy_srcs=["/".join(str(p) for p in parts)])  # joined: frame 1 slice 10 != frame 11 slice 0


def _ds(value: float) -> str:
    """A decimal string (DS, at most 16 characters)."""
    return f"{value:.6g}"


def _slice_dataset(image: np.ndarray, headers: dict, path: Path) -> None:
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, ExplicitVRLittleEndian

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MR_IMAGE_STORAGE
    meta.MediaStorageSOPInstanceUID = headers["SOPInstanceUID"]
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MR_IMAGE_STORAGE
    for keyword, value in headers.items():
        setattr(ds, keyword, value)
    ds.Modality = "MR"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = image.shape
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.PixelData = np.ascontiguousarray(image, dtype="<u2").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)


def write_phantom_dicom(
    out_dir: str | Path,
    num_patients: int = 4,
    seed: int = 0,
    image_size: tuple[int, int] = (64, 64),
    layout: str = "single_series",
) -> Path:
    """Write the synthetic cardiac phantom (:func:`~gcl_monai.data.phantom.synthesize_patient`, the same patients as
    :func:`~gcl_monai.data.phantom.generate_acdc_phantom` with the same ``seed``) as a DICOM archive of cine MR
    short-axis series (MR Image Storage), the ED and ES phases of each patient.

    Each slice carries PatientID (``patientXXX``), Study/Series/SOP Instance and Frame of Reference UIDs (the same
    for the same ``seed``), an oblique ImageOrientationPatient (:func:`short_axis_orientation`),
    ImagePositionPatient stepping by SliceThickness along the slice normal from base (first slice of the phantom) to
    apex, PixelSpacing, TriggerTime ``(frame - 1) * NominalInterval / CardiacNumberOfImages`` for the phantom's
    ``NbFrame`` frames, TemporalPositionIdentifier (the frame), and Manufacturer, ManufacturerModelName,
    MagneticFieldStrength and InstitutionName of one of two sites (alternating by patient). InstanceNumber does not
    follow the position (it counts from the apex), as in many exports. File names are opaque and nested as
    ``<out_dir>/pt<n>/st<n>/se_<series>/IM<n>``.

    The voxels of a volume read back in slice-position order equal the phantom's ``(rows, cols, slices)`` array:
    the DICOM columns run along the array's first axis and the rows along its second.

    Args:
        out_dir: output folder.
        num_patients: number of patients (groups in blocks like ACDC).
        seed: random seed.
        image_size: in-plane size of the phantom.
        layout: one of :data:`DICOM_PHANTOM_LAYOUTS`.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: for an unknown ``layout`` or ``num_patients`` < 1.
    """
    if layout not in DICOM_PHANTOM_LAYOUTS:
        raise ValueError(f"layout must be one of {DICOM_PHANTOM_LAYOUTS}, got {layout!r}.")
    if num_patients < 1:
        raise ValueError(f"num_patients must be >= 1, got {num_patients}.")
    out_dir = Path(out_dir)
    row_dir, col_dir = short_axis_orientation()
    normal = np.cross(row_dir, col_dir)
    for i in range(num_patients):
        name = f"patient{i + 1:03d}"
        group = ACDC_GROUPS[i * len(ACDC_GROUPS) // num_patients]
        info, frames = synthesize_patient(np.random.default_rng([seed, i]), group, tuple(image_size))
        site, model, field = _SITES[i % len(_SITES)]
        rr = 800.0 + 20.0 * i  # ms
        spacing = info["spacing"]
        study = _uid(seed, name, "study")
        origin = np.array([-0.5 * spacing[0] * image_size[0], -0.5 * spacing[1] * image_size[1], 40.0])
        patient = {
            "PatientID": name,
            "PatientName": f"Phantom^{name}",
            "PatientBirthDate": "",
            "PatientSex": "O",
            "StudyInstanceUID": study,
            "StudyID": f"{i + 1}",
            "StudyTime": "120000",
            "AccessionNumber": "",
            "ReferringPhysicianName": "",
            "FrameOfReferenceUID": _uid(seed, name, "frame of reference"),
            "StudyDate": "20260101",
            "AcquisitionDate": "20260101",
            "Manufacturer": "GCL",
            "ManufacturerModelName": model,
            "MagneticFieldStrength": _ds(field),
            "InstitutionName": site,
            "SeriesDescription": "cine SA",
            "ImageOrientationPatient": [_ds(v) for v in (*row_dir, *col_dir)],
            "PixelSpacing": [_ds(spacing[1]), _ds(spacing[0])],
            "SliceThickness": _ds(SLICE_THICKNESS_MM),
            "NominalInterval": _ds(rr),
            "CardiacNumberOfImages": int(info["NbFrame"]),
        }
        num_slices = next(iter(frames.values()))[0].shape[2]
        for phase, (frame, (volume, _)) in enumerate(sorted(frames.items())):
            for k in range(num_slices):
                position = origin + k * SLICE_THICKNESS_MM * normal
                series_key = (name,) if layout == "single_series" else (name, k)
                headers = dict(patient)
                headers.update(
                    SeriesInstanceUID=_uid(seed, *series_key, "series"),
                    SeriesNumber=1 if layout == "single_series" else k + 1,
                    SOPInstanceUID=_uid(seed, name, frame, k, "instance"),
                    InstanceNumber=(phase * num_slices + num_slices - k) if layout == "single_series" else phase + 1,
                    ImagePositionPatient=[_ds(v) for v in position],
                    SliceLocation=_ds(float(position @ normal)),
                    TriggerTime=_ds((frame - 1) * rr / int(info["NbFrame"])),
                    TemporalPositionIdentifier=frame,
                )
                series = "_".join(str(s) for s in series_key)
                file = out_dir / f"pt{i + 1:03d}" / f"st{study[-6:]}" / f"se_{series}" / f"IM{frame:02d}{k:03d}"
                _slice_dataset(volume[..., k].T, headers, file)
    logger.info("Wrote %d synthetic DICOM cine patients (%s layout) to %s.", num_patients, layout, out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m gcl_monai.data.dicom.phantom_dicom --out DIR [--num-patients N] [--layout L]``."""
    parser = argparse.ArgumentParser(description="Write the synthetic cardiac phantom as a DICOM cine archive.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-patients", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image-size", type=int, nargs=2, default=(64, 64), metavar=("ROWS", "COLS"))
    parser.add_argument("--layout", choices=DICOM_PHANTOM_LAYOUTS, default="single_series")
    args = parser.parse_args(argv)
    print(write_phantom_dicom(args.out, args.num_patients, args.seed, tuple(args.image_size), args.layout))


if __name__ == "__main__":
    main()
