"""``python -m gcl_monai.data.dicom DIR --output datalist.json``: the datalist of a DICOM archive (one entry per 3D
volume with its converted NIfTI and meta labels) and a summary of what was skipped and why."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from gcl_monai.data.datalist import DatalistError
from gcl_monai.data.dicom.index import index_dicom
from gcl_monai.data.dicom.meta import check_meta_keys
from gcl_monai.data.dicom.reader import default_cache_dir, read_dicom


def main(argv: list[str] | None = None) -> int:
    """Write the datalist (decathlon-style JSON, ``{"name": "dicom", "training": [...], "summary": {...}}``, readable
    by ``dataset="json"``) and print the summary; exit 1 when no volume is usable."""
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.data.dicom", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the DICOM folder (any nesting, any file names)")
    parser.add_argument("--output", required=True, help="the datalist JSON file to write")
    parser.add_argument(
        "--cache-dir",
        help="header cache and NIfTI volumes (default: $GCL_DICOM_CACHE or ~/.cache/gcl_monai/dicom/<hash of DIR>)",
    )
    parser.add_argument(
        "--meta-labels",
        nargs="*",
        default=["patient_id"],
        help="built-in labels (patient_id; for cine: cardiac_phase, end_diastole) and DICOM keywords "
        "(default: patient_id)",
    )
    parser.add_argument("--phase-bins", type=int, default=4, help="cardiac phase bins over the RR interval")
    parser.add_argument("--hash-patient-id", action="store_true", help="pseudonymise PatientID (sha256, salted)")
    parser.add_argument("--salt", default="", help="salt of the PatientID hash")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    root = Path(args.root)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir(root)
    index = index_dicom(root, check_meta_keys(args.meta_labels), cache / "headers.json")
    skipped: list[dict] = []
    try:
        datalist = read_dicom(
            root,
            args.meta_labels,
            cache,
            args.phase_bins,
            args.hash_patient_id,
            args.salt,
            index=index,
            skipped=skipped,
        )
    except DatalistError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    summary = {**index.summary(), "volumes": len(datalist), "skipped": skipped}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"name": "dicom", "training": datalist, "summary": summary}, indent=2))
    print(
        f"{len(datalist)} volume(s) of {len({d['patient'] for d in datalist})} patient(s) -> {args.output} "
        f"(NIfTI in {cache / 'volumes'})"
    )
    print(f"{summary['non_dicom_files']} non-DICOM file(s) skipped")
    for s in skipped:
        print(
            f"skipped {len(s['files'])} file(s) of series {', '.join(s['series']) or '-'}: {s['reason']} "
            f"(first: {s['files'][0]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
