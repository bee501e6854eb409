"""A bundle's ``inference.json`` run as a user runs it: ``python -m monai.bundle run`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())


def run_bundle_inference(
    config_file: Path | str, folder: Path | str, features: list[int], *extra: str, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    """Segment the cases of ``folder`` with a BasicUNet of ``features`` on 32 x 32 slices, one OpenMP thread, from
    ``cwd``, with the ``extra`` arguments (the bundle's own model and output folder unless they name others); the
    exit status is left to the caller."""
    cmd = [sys.executable, "-m", "monai.bundle", "run", "--config_file", str(config_file)]
    cmd += ["--dataset_dir", str(folder), "--image_size", "[32, 32]", "--features", json.dumps(features), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)


def run_inference(
    config_file: Path, folder: Path, out: Path, model: Path, features: list[int], *extra: str
) -> subprocess.CompletedProcess:
    """:func:`run_bundle_inference` from the repository root, into ``out`` with the weights ``model``."""
    return run_bundle_inference(
        config_file, folder, features, "--output_dir", str(out), "--handlers#0#load_path", str(model), *extra
    )
