"""Where the bundles are (gcl_monai.bundle.locate.default_bundle_dir): $GCL_BUNDLE_DIR, else the source checkout's
bundles/, else the copy installed with the distribution (found through its record of installed files), else an error
naming the places tried; and a bundle's own folder, its bundle_root (bundle_folder)."""

import importlib.metadata
from pathlib import Path, PurePosixPath

import pytest

import gcl_monai
from gcl_monai.bundle import locate
from gcl_monai.bundle.locate import BUNDLE_DIR_VARIABLE, bundle_folder, default_bundle_dir


class _InstalledFile(PurePosixPath):
    """An entry of a distribution's RECORD: a path relative to site-packages that ``locate()`` resolves."""

    site_packages: Path

    def locate(self) -> Path:
        return self.site_packages / self


def _distribution(site_packages: Path, *paths: str):
    files = []
    for path in paths:
        file = _InstalledFile(path)
        file.site_packages = site_packages
        files.append(file)

    class Distribution:
        pass

    distribution = Distribution()
    distribution.files = files
    return distribution


@pytest.fixture
def no_variable(monkeypatch):
    monkeypatch.delenv(BUNDLE_DIR_VARIABLE, raising=False)


def test_the_variable_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(BUNDLE_DIR_VARIABLE, str(tmp_path / "b" / ".." / "b"))
    (tmp_path / "b").mkdir()
    assert default_bundle_dir() == (tmp_path / "b").resolve()
    monkeypatch.setenv(BUNDLE_DIR_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=r"\$GCL_BUNDLE_DIR = '.*missing' is not a folder"):
        default_bundle_dir()


def test_a_source_checkout_uses_its_own_bundles(no_variable):
    checkout = Path(gcl_monai.__file__).resolve().parents[1] / "bundles"
    assert checkout.is_dir() and default_bundle_dir() == checkout


def test_an_install_uses_the_bundles_recorded_with_the_distribution(tmp_path, monkeypatch, no_variable):
    # the package without a checkout around it, installed into <prefix>/lib/site-packages
    monkeypatch.setattr(locate, "__file__", str(tmp_path / "site" / "gcl_monai" / "bundle" / "locate.py"))
    prefix, site_packages = tmp_path / "prefix", tmp_path / "prefix" / "lib" / "site-packages"
    config = prefix / "share" / "gcl-monai" / "bundles" / "gcl_demo" / "configs" / "train.json"
    config.parent.mkdir(parents=True)
    config.touch()
    recorded = _distribution(
        site_packages,
        "gcl_monai/__init__.py",
        "../../share/gcl-monai/bundles/gcl_demo/configs/train.json",
    )
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: recorded)
    assert default_bundle_dir() == (prefix / "share" / "gcl-monai" / "bundles").resolve()
    # installed without its bundles (only the package's files recorded), or not installed at all: the error names
    # the places tried
    without = _distribution(site_packages, "gcl_monai/__init__.py", "share/gcl-monai/README.md")
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: without)
    with pytest.raises(FileNotFoundError, match=r"(?s)GCL_BUNDLE_DIR is not set, .*site.*bundles does not exist"):
        default_bundle_dir()

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(FileNotFoundError, match="share/gcl-monai/bundles; set \\$GCL_BUNDLE_DIR or pass --bundle-dir"):
        default_bundle_dir()


def test_bundle_folder_is_the_bundle_from_inside_it_and_from_the_repository_root(tmp_path, monkeypatch):
    """``bundle_root``'s default: ``"."`` inside a bundle (a folder holding ``configs/metadata.json``) or anywhere
    without the bundle under ``bundles/``, ``bundles/<name>`` from a folder that holds it (the repository root)."""
    bundle = tmp_path / "bundles" / "gcl_acdc"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "configs" / "metadata.json").write_text("{}")
    monkeypatch.chdir(bundle)
    assert bundle_folder("gcl_acdc") == "."
    monkeypatch.chdir(tmp_path)
    assert bundle_folder("gcl_acdc") == "bundles/gcl_acdc"
    assert Path(bundle_folder("gcl_acdc"), "configs", "metadata.json").is_file()
    assert bundle_folder("gcl_prostate") == "."
