"""How the harness runs the bundles (``monai.bundle.run`` of a config with overrides); where they are:
:py:func:`gcl_monai.bundle.locate.default_bundle_dir`."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import monai.bundle
from monai.bundle import ConfigParser

from gcl_monai.bundle.locate import BUNDLE_DIR_VARIABLE, default_bundle_dir

__all__ = ["BUNDLE_DIR_VARIABLE", "bundle_config", "default_bundle_dir", "parse_bundle_item", "run_bundle"]

logger = logging.getLogger("experiments")


def bundle_config(bundle: Path, config: str) -> dict[str, Any]:
    """``<bundle>/configs/<config>.json`` as a dict (not parsed: no expression is evaluated)."""
    return json.loads((Path(bundle) / "configs" / f"{config}.json").read_text())


def run_bundle(bundle: Path, config: str, run_id: str, overrides: Mapping[str, Any]) -> None:
    """``monai.bundle.run`` of ``<bundle>/configs/<config>.json`` with ``overrides``."""
    configs = Path(bundle) / "configs"
    logger.debug("monai.bundle.run(%r, config_file=%s, %s)", run_id, configs / f"{config}.json", dict(overrides))
    try:
        monai.bundle.run(
            run_id,
            meta_file=str(configs / "metadata.json"),
            config_file=str(configs / f"{config}.json"),
            logging_file=str(configs / "logging.conf"),
            **overrides,
        )
    finally:
        gc.collect()


def parse_bundle_item(bundle: Path, config: str, key: str, overrides: Mapping[str, Any]) -> Any:
    """One item of a bundle config, parsed with ``overrides`` (e.g. the split or the labelled subset)."""
    parser = ConfigParser()
    parser.read_config(str(Path(bundle) / "configs" / f"{config}.json"))
    parser.update(dict(overrides))
    return parser.get_parsed_content(key)
