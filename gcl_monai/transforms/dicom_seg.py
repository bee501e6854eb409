"""The label map of a DICOM series written back as DICOM SEG (highdicom), referencing the source series."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import MapTransform

logger = logging.getLogger("gcl_monai.transforms")

__all__ = ["SaveDicomSegd", "label_map_on_source", "write_dicom_seg"]

#: Type 2 attributes of the patient and study modules that highdicom copies from the source; absent ones are written
#: empty (the standard's value for "unknown").
_TYPE2_EMPTY = (
    "PatientName",
    "PatientBirthDate",
    "PatientSex",
    "StudyDate",
    "StudyTime",
    "ReferringPhysicianName",
    "AccessionNumber",
    "StudyID",
)
_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0])


def _version() -> str:
    try:
        return importlib.metadata.version("gcl-monai")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def label_map_on_source(label: torch.Tensor | np.ndarray, affine: np.ndarray, datasets: Sequence) -> np.ndarray:
    """The label map sampled at the pixels of each source slice: ``(slices, Rows, Columns)``.

    The patient position of pixel (row r, column c) of a slice is ``IPP + c * dc * X + r * dr * Y`` (X, Y the row and
    column direction cosines of ImageOrientationPatient, ``[dr, dc]`` its PixelSpacing; DICOM PS3.3 C.7.6.2.1.1),
    converted from LPS to the RAS of MONAI's affine and mapped to the nearest voxel of ``label``. The label map must
    cover every source pixel (the inference writes it in the source geometry).

    Args:
        label: the label map, ``(1, X, Y, Z)`` or ``(X, Y, Z)``.
        affine: its voxel-to-RAS affine (MONAI's ``MetaTensor.affine``).
        datasets: the source slices (pydicom datasets with the image plane attributes).

    Raises:
        ValueError: when a source pixel falls outside the label map (the geometries disagree).
    """
    array = np.asarray(label.detach().cpu() if isinstance(label, torch.Tensor) else label)
    array = array[0] if array.ndim == 4 else array
    to_voxel = np.linalg.inv(np.asarray(affine, dtype=float))
    out = []
    for ds in datasets:
        o = np.asarray(ds.ImageOrientationPatient, dtype=float)
        dr, dc = (float(v) for v in ds.PixelSpacing)
        rows, cols = np.meshgrid(np.arange(ds.Rows), np.arange(ds.Columns), indexing="ij")
        lps = (
            np.asarray(ds.ImagePositionPatient, dtype=float)[:, None, None]
            + o[:3, None, None] * dc * cols
            + o[3:, None, None] * dr * rows
        )
        ras = np.tensordot(_LPS_TO_RAS, lps, axes=1)
        ijk = np.tensordot(to_voxel[:3, :3], ras, axes=1) + to_voxel[:3, 3, None, None]
        index = np.rint(ijk).astype(int)
        if (index < 0).any() or any((index[a] >= array.shape[a]).any() for a in range(3)):
            raise ValueError(
                f"SOP instance {ds.SOPInstanceUID}: its pixels fall outside the label map "
                f"{array.shape} (the label map is not in the source geometry)."
            )
        out.append(array[index[0], index[1], index[2]])
    return np.stack(out).astype(np.uint8)


def write_dicom_seg(
    label: MetaTensor,
    source_files: Sequence[str | Path],
    output_path: str | Path,
    class_names: Sequence[str],
    series_number: int = 900,
    algorithm: str = "GCL BasicUNet",
) -> Path:
    """Write a label map as a DICOM SEG (binary segments, highdicom) referencing its source slices.

    Segment ``i`` (1-based) is the label value ``i``, named ``class_names[i - 1]`` (category and type: SNOMED CT
    "Tissue", the name in SegmentLabel); empty frames are left out. The source slices keep their order; a volume
    stacked from several series (the one-series-per-slice-location layout) references every series.

    Args:
        label: the label map with its affine, in the source geometry (``(1, X, Y, Z)``).
        source_files: the DICOM files of the source slices.
        output_path: the SEG file to write.
        class_names: names of the label values 1..N.
        series_number: SeriesNumber of the SEG.
        algorithm: algorithm name recorded in the segment descriptions.

    Returns:
        ``output_path``.
    """
    import highdicom as hd
    import pydicom
    from pydicom.sr.codedict import codes

    datasets = [pydicom.dcmread(str(f), stop_before_pixels=True) for f in source_files]
    for ds in datasets:
        for keyword in _TYPE2_EMPTY:
            if keyword not in ds:
                setattr(ds, keyword, "")
    mask = label_map_on_source(label, label.affine, datasets)
    algorithm_id = hd.AlgorithmIdentificationSequence(
        name=algorithm, version=_version(), family=codes.cid7162.ArtificialIntelligence
    )
    segments = [
        hd.seg.SegmentDescription(
            segment_number=number,
            segment_label=str(name),
            segmented_property_category=codes.SCT.Tissue,
            segmented_property_type=codes.SCT.Tissue,
            algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
            algorithm_identification=algorithm_id,
        )
        for number, name in enumerate(class_names, start=1)
    ]
    # highdicom's source images are one series; the slices of a volume stacked across series are referenced as
    # further source images, with their plane positions given
    geometry = {}
    if len({ds.SeriesInstanceUID for ds in datasets}) > 1:
        geometry = {
            "further_source_images": datasets[1:],
            "plane_positions": [hd.PlanePositionSequence("PATIENT", ds.ImagePositionPatient) for ds in datasets],
            "plane_orientation": hd.PlaneOrientationSequence("PATIENT", datasets[0].ImageOrientationPatient),
            "pixel_measures": hd.PixelMeasuresSequence(datasets[0].PixelSpacing, datasets[0].get("SliceThickness")),
        }
    seg = hd.seg.Segmentation(
        source_images=datasets[:1] if geometry else datasets,
        pixel_array=mask,
        segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=segments,
        series_instance_uid=hd.UID(),
        series_number=series_number,
        sop_instance_uid=hd.UID(),
        instance_number=1,
        manufacturer="gcl-monai",
        manufacturer_model_name=algorithm,
        software_versions=_version(),
        device_serial_number="0",
        **geometry,
    )
    output_path = Path(output_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    seg.save_as(output_path)
    return output_path


class SaveDicomSegd(MapTransform):
    """
    Writes the label map of a case read from a DICOM series folder as ``<output_dir>/<folder name>_<postfix>.dcm``, a
    DICOM SEG referencing the folder's slices (:func:`write_dicom_seg`). A case read from any other file (NIfTI)
    passes unchanged, so one inference config serves both.

    Args:
        keys: the label map keys (``MetaTensor`` in the source geometry, after ``Invertd``).
        output_dir: the output folder.
        class_names: names of the label values 1..N.
        output_postfix: appended to the folder name.
        allow_missing_keys: do not raise when a key is missing.
    """

    def __init__(
        self,
        keys: KeysCollection,
        output_dir: str | Path,
        class_names: Sequence[str],
        output_postfix: str = "seg",
        allow_missing_keys: bool = False,
    ):
        super().__init__(keys, allow_missing_keys)
        self.output_dir = Path(output_dir)
        self.class_names = list(class_names)
        self.output_postfix = output_postfix

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        """
        Args:
            data: a dictionary whose label maps carry ``filename_or_obj`` in their metadata.

        Returns:
            ``data`` (a shallow copy), after writing the SEG files of its DICOM cases.
        """
        d = dict(data)
        for key in self.key_iterator(d):
            name = getattr(d[key], "meta", {}).get("filename_or_obj")
            source = Path(str(name)) if name else None
            if source is None or not source.is_dir():
                continue
            files = sorted(str(p) for p in source.iterdir() if p.is_file())
            path = write_dicom_seg(
                d[key], files, self.output_dir / f"{source.name}_{self.output_postfix}.dcm", self.class_names
            )
            logger.info("%s: DICOM SEG written to %s.", source, path)
        return d
