"""Where the ``gcl_<data>`` bundles are: a source checkout's ``bundles/``, or the copy installed with the package;
and a bundle's own folder as its configs' ``bundle_root`` sees it."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

__all__ = ["BUNDLE_DIR_VARIABLE", "INSTALLED_BUNDLES", "bundle_folder", "default_bundle_dir"]

BUNDLE_DIR_VARIABLE = "GCL_BUNDLE_DIR"
#: where ``pip install`` puts the bundles (``[options.data_files]`` of setup.cfg), relative to the install prefix.
INSTALLED_BUNDLES = ("share", "gcl-monai", "bundles")


def _installed_bundle_dir() -> Path | None:
    """The bundles installed with the ``gcl-monai`` distribution (a wheel or ``pip install .``), found through its
    record of installed files; None when it is not installed or was installed without them."""
    try:
        files = importlib.metadata.distribution("gcl-monai").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        parts = file.parts
        for i in range(len(parts) - len(INSTALLED_BUNDLES)):
            if parts[i : i + len(INSTALLED_BUNDLES)] == INSTALLED_BUNDLES:
                folder = Path(file.locate()).parents[len(parts) - i - len(INSTALLED_BUNDLES) - 1]
                return folder.resolve()
    return None


def default_bundle_dir() -> Path:
    """
    The folder of the ``gcl_<data>`` bundles: ``$GCL_BUNDLE_DIR`` when set, else the ``bundles/`` folder of the
    source checkout this package runs from (an editable install), else the copy installed with the package
    (``<prefix>/share/gcl-monai/bundles`` after ``pip install .`` or a wheel).

    Raises:
        FileNotFoundError: when ``$GCL_BUNDLE_DIR`` is not a folder, or no bundle folder is found; the message
            names the places tried.
    """
    explicit = os.environ.get(BUNDLE_DIR_VARIABLE)
    if explicit:
        if not Path(explicit).is_dir():
            raise FileNotFoundError(f"${BUNDLE_DIR_VARIABLE} = {explicit!r} is not a folder.")
        return Path(explicit).resolve()
    checkout = Path(__file__).resolve().parents[2] / "bundles"  # <root>/gcl_monai/bundle/locate.py
    if checkout.is_dir():
        return checkout
    installed = _installed_bundle_dir()
    if installed is not None and installed.is_dir():
        return installed
    raise FileNotFoundError(
        f"No bundle folder: ${BUNDLE_DIR_VARIABLE} is not set, {checkout} does not exist and the installed "
        "gcl-monai distribution holds no share/gcl-monai/bundles; set $GCL_BUNDLE_DIR or pass --bundle-dir."
    )


def bundle_folder(name: str) -> str:
    """
    A bundle config's default ``bundle_root``, relative to the working directory: ``"."`` when the working directory
    is a bundle (it holds ``configs/metadata.json``: run from inside the bundle, as the model-zoo's are, wherever it
    was copied) or holds no ``bundles/<name>``; ``"bundles/<name>"`` when it does (the repository root, where the
    README runs the bundles). ``--bundle_root`` overrides it.
    """
    if Path("configs", "metadata.json").is_file() or not Path("bundles", name).is_dir():
        return "."
    return f"bundles/{name}"
