"""How the harness runs the bundles (``monai.bundle.run`` of a config with overrides; ``evaluate.json`` on top of
``train.json``); where they are: :py:func:`gcl_monai.bundle.locate.default_bundle_dir`."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import monai.bundle
from monai.bundle import ConfigParser, ReferenceResolver

from gcl_monai.bundle.locate import BUNDLE_DIR_VARIABLE, default_bundle_dir

__all__ = [
    "BUNDLE_DIR_VARIABLE",
    "STACKS",
    "bundle_config",
    "config_files",
    "default_bundle_dir",
    "keys_read",
    "parse_bundle_item",
    "run_bundle",
    "stacked_config",
]

logger = logging.getLogger("experiments")

#: the configs a run of a config stacks, in order (MONAI's ``--config_file "['a.json','b.json']"``, later files
#: overriding top-level keys): ``evaluate.json`` is an overlay on ``train.json``, as in the model-zoo's bundles; a
#: config not named here runs alone.
STACKS: dict[str, tuple[str, ...]] = {"evaluate": ("train", "evaluate")}


def config_files(bundle: Path, config: str) -> list[str]:
    """The files a run of ``config`` reads: ``<bundle>/configs/<name>.json`` of each config of its stack."""
    return [str(Path(bundle) / "configs" / f"{name}.json") for name in STACKS.get(config, (config,))]


def bundle_config(bundle: Path, config: str) -> dict[str, Any]:
    """``<bundle>/configs/<config>.json`` alone as a dict (not parsed: no expression is evaluated)."""
    return json.loads((Path(bundle) / "configs" / f"{config}.json").read_text())


def stacked_config(bundle: Path, config: str) -> dict[str, Any]:
    """The config a run of ``config`` reads as a dict: the files of its stack (:py:func:`config_files`) merged as
    MONAI merges them (not parsed)."""
    return ConfigParser.load_config_files(config_files(bundle, config))


def keys_read(config: Mapping[str, Any], steps: Iterable[str] = ("initialize", "run", "finalize")) -> set[str]:
    """
    The top-level keys that a run of ``config`` reads: its workflow ``steps`` and every key they refer to (``@key``,
    ``$...@key...``), directly or through other keys. For ``evaluate.json`` on top of ``train.json``: the keys of the
    evaluation (the network, the split, the preprocessing's settings), not those only the training reads (``lr``,
    ``epochs``).
    """
    read: set[str] = set()
    todo = [key for key in steps if key in config]
    while todo:
        key = todo.pop()
        if key in read or key not in config:
            continue
        read.add(key)
        refs = ReferenceResolver.find_refs_in_config(config[key], id=key)
        todo.extend(ReferenceResolver.normalize_id(ref).split(ReferenceResolver.sep)[0] for ref in refs)
    return read


def run_bundle(bundle: Path, config: str, run_id: str, overrides: Mapping[str, Any]) -> None:
    """``monai.bundle.run`` of ``<bundle>/configs/<config>.json`` (on top of the configs of its stack) with
    ``overrides``."""
    configs = Path(bundle) / "configs"
    files = config_files(bundle, config)
    logger.debug("monai.bundle.run(%r, config_file=%s, %s)", run_id, files, dict(overrides))
    try:
        monai.bundle.run(
            run_id,
            meta_file=str(configs / "metadata.json"),
            config_file=files if len(files) > 1 else files[0],
            logging_file=str(configs / "logging.conf"),
            **overrides,
        )
    finally:
        gc.collect()


def parse_bundle_item(bundle: Path, config: str, key: str, overrides: Mapping[str, Any]) -> Any:
    """One item of a bundle config (on top of the configs of its stack), parsed with ``overrides`` (e.g. the split
    or the labelled subset)."""
    files = config_files(bundle, config)
    parser = ConfigParser()
    parser.read_config(files if len(files) > 1 else files[0])
    parser.update(dict(overrides))
    return parser.get_parsed_content(key)
