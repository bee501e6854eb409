"""A non-editable install (``pip install .`` into a fresh virtual environment) ships the bundles and finds them:
``default_bundle_dir`` points at the installed copy, and the installed demo bundle's inference runs from there."""

from __future__ import annotations

import importlib.util
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
from gcl_monai.bundle.locate import default_bundle_dir
from monai.bundle import ConfigParser
import torch

bundles = default_bundle_dir()
parser = ConfigParser()
parser.read_config(str(bundles / "gcl_demo" / "configs" / "inference.json"))
torch.save(parser.get_parsed_content("network_def").state_dict(), sys.argv[1])
print(json.dumps({"package": gcl_monai.__file__, "bundles": str(bundles)}))
"""


def _offline_build_missing() -> str | None:
    """Why this environment cannot build the package's wheel without an index (None when it can)."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed"
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        return "neither wheel nor setuptools>=70.1 (which provides bdist_wheel) is installed"
    return None


def _running_site_dirs() -> list[str]:
    """The site-packages folders of the interpreter running the tests (a virtual environment's own included)."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh virtual environment with gcl-monai installed from this checkout, not editable, that sees the
    packages of the environment running the tests (torch, MONAI).

    ``venv`` always builds on the base interpreter, whose ``system_site_packages`` are not those of an active virtual
    environment (a user's ``python -m venv .venv``); a ``.pth`` file therefore lists the running environment's
    site-packages folders after the new environment's own. Their ``.pth`` files are not read, so an editable
    install of this checkout there stays invisible."""
    missing = _offline_build_missing()
    if missing:
        pytest.skip(
            f"the install test builds gcl-monai offline with the running environment's build tools: {missing}"
            " (pip install 'gcl-monai[dev]' installs them)"
        )
    root = tmp_path_factory.mktemp("install")
    # a copy of the source: the build writes build/ and *.egg-info next to setup.cfg, not into this checkout
    source = root / "source"
    skip = ("build", "dist", "results", "runs", "outputs", "models", "eval", "work", "*.egg-info", "__pycache__")
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".pytest_cache", *skip))
    venv.create(root / "venv", system_site_packages=False, with_pip=False)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "_running_environment.pth").write_text("\n".join(_running_site_dirs()) + "\n")
    # the running environment's pip installs into the virtual environment it is run from
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(source)],
        check=True,
        cwd=root,
    )
    return root, python


def test_installed_package_runs_its_installed_bundle(installed):
    root, python = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GCL_BUNDLE_DIR")}
    env["OMP_NUM_THREADS"] = "1"
    found = subprocess.run(
        [str(python), "-c", SCRIPT, str(root / "model.pt")],
        check=True,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    where = json.loads(found.stdout.strip().splitlines()[-1])
    venv_dir = (root / "venv").resolve()
    assert Path(where["package"]).resolve().is_relative_to(venv_dir)  # not this checkout
    bundles = Path(where["bundles"])
    assert bundles == venv_dir / "share" / "gcl-monai" / "bundles"
    assert sorted(p.name for p in bundles.iterdir()) == sorted(p.name for p in (REPO / "bundles").iterdir())
    for bundle in (REPO / "bundles").iterdir():  # every config of every bundle is shipped, unchanged
        configs = bundle / "configs"
        for config in (p for p in configs.rglob("*") if p.is_file()):  # the recipe overlays of configs/recipes too
            assert (bundles / bundle.name / "configs" / config.relative_to(configs)).read_bytes() == config.read_bytes()

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
            str(python),
            "-m",
            "monai.bundle",
            "run",
            "--config_file",
            str(bundle / "configs" / "inference.json"),
            "--bundle_root",
            str(bundle),
            "--dataset_dir",
            str(data),
            "--output_dir",
            str(root / "out"),
            "--handlers#0#load_path",
            str(root / "model.pt"),
        ],
        check=True,
        cwd=root,
        env=env,
        capture_output=True,
    )
    seg = nib.load(root / "out" / "case01_seg.nii.gz")
    assert seg.shape == volume.shape


def test_bundle_dir_setting_wins(installed, tmp_path):
    root, python = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["GCL_BUNDLE_DIR"] = str(tmp_path)
    out = subprocess.run(
        [str(python), "-c", "from gcl_monai.bundle.locate import default_bundle_dir; print(default_bundle_dir())"],
        check=True,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert Path(out.stdout.strip()) == tmp_path.resolve()
    env["GCL_BUNDLE_DIR"] = str(tmp_path / "missing")
    failed = subprocess.run(
        [str(python), "-c", "from gcl_monai.bundle.locate import default_bundle_dir; default_bundle_dir()"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "GCL_BUNDLE_DIR" in failed.stderr and "missing" in failed.stderr
