"""A non-editable install (``pip install .`` into a fresh virtual environment) ships the bundles and finds them:
``default_bundle_dir`` points at the installed copy, and the installed demo bundle's inference runs from there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
from pathlib import Path
import gcl_monai
from gcl_monai.benchmark import default_bundle_dir
from monai.bundle import ConfigParser
import torch

bundles = default_bundle_dir()
parser = ConfigParser()
parser.read_config(str(bundles / "gcl_demo" / "configs" / "inference.json"))
torch.save(parser.get_parsed_content("network_def").state_dict(), sys.argv[1])
print(json.dumps({"package": gcl_monai.__file__, "bundles": str(bundles)}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A virtual environment (seeing the global packages: torch, MONAI) with gcl-monai installed from this
    checkout, not editable."""
    root = tmp_path_factory.mktemp("install")
    # a copy of the source: the build writes build/ and *.egg-info next to setup.cfg, not into this checkout
    source = root / "source"
    skip = ("build", "dist", "results", "runs", "outputs", "models", "eval", "work", "*.egg-info", "__pycache__")
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".pytest_cache", *skip))
    venv.create(root / "venv", system_site_packages=True, with_pip=False)
    python = root / "venv" / "bin" / "python"
    # the global pip installs into the virtual environment it is run from
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(source)],
        check=True, cwd=root,
    )
    return root, python


def test_installed_package_runs_its_installed_bundle(installed):
    root, python = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GCL_BUNDLE_DIR")}
    env["OMP_NUM_THREADS"] = "1"
    found = subprocess.run(
        [str(python), "-c", SCRIPT, str(root / "model.pt")], check=True, cwd=root, env=env, capture_output=True,
        text=True,
    )
    where = json.loads(found.stdout.strip().splitlines()[-1])
    venv_dir = (root / "venv").resolve()
    assert Path(where["package"]).resolve().is_relative_to(venv_dir)  # not this checkout
    bundles = Path(where["bundles"])
    assert bundles == venv_dir / "share" / "gcl-monai" / "bundles"
    assert sorted(p.name for p in bundles.iterdir()) == sorted(p.name for p in (REPO / "bundles").iterdir())
    for bundle in (REPO / "bundles").iterdir():  # every config of every bundle is shipped, unchanged
        for config in (bundle / "configs").iterdir():
            assert (bundles / bundle.name / "configs" / config.name).read_bytes() == config.read_bytes()

    # the installed bundle's inference, run from the install (its models/ is not written to)
    import nibabel as nib
    import numpy as np

    data = root / "data"
    data.mkdir()
    volume = np.random.default_rng(0).random((40, 40, 3)).astype(np.float32)
    nib.save(nib.Nifti1Image(volume, np.eye(4)), data / "case01.nii.gz")
    bundle = bundles / "gcl_demo"
    subprocess.run(
        [
            str(python), "-m", "monai.bundle", "run",
            "--config_file", str(bundle / "configs" / "inference.json"),
            "--bundle_root", str(bundle),
            "--dataset_dir", str(data),
            "--output_dir", str(root / "out"),
            "--handlers#0#load_path", str(root / "model.pt"),
        ],
        check=True, cwd=root, env=env, capture_output=True,
    )
    seg = nib.load(root / "out" / "case01_seg.nii.gz")
    assert seg.shape == volume.shape


def test_bundle_dir_setting_wins(installed, tmp_path):
    root, python = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GCL_BUNDLE_DIR"] = str(tmp_path)
    out = subprocess.run(
        [str(python), "-c", "from gcl_monai.benchmark import default_bundle_dir; print(default_bundle_dir())"],
        check=True, cwd=root, env=env, capture_output=True, text=True,
    )
    assert Path(out.stdout.strip()) == tmp_path.resolve()
    env["GCL_BUNDLE_DIR"] = str(tmp_path / "missing")
    failed = subprocess.run(
        [str(python), "-c", "from gcl_monai.benchmark import default_bundle_dir; default_bundle_dir()"],
        cwd=root, env=env, capture_output=True, text=True,
    )
    assert failed.returncode != 0 and "GCL_BUNDLE_DIR" in failed.stderr and "missing" in failed.stderr
