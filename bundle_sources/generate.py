"""
Writes the bundles' configs from one source: ``bundle_sources/common/<config>`` (the workflow, written once) merged
with ``bundle_sources/<bundle>/<config>`` (that bundle's dataset values) by MONAI's own multi-file merge
(``ConfigParser.load_config_files``: later files override top-level keys, ``a#b`` keys reach into nested ones).
Each bundle stays a self-contained folder of complete configs, so every documented command, override, MONAI Label
and the ``monai.bundle`` tools work on it unchanged, also after it is copied elsewhere.

    python bundle_sources/generate.py          # rewrite bundles/<bundle>/configs/<config> from the sources
    python bundle_sources/generate.py --check  # exit 1 and name the configs that differ from their sources

Every config of ``common`` is generated for every bundle folder of ``bundle_sources`` (a bundle without its own file
for a config takes the common one as it is); ``logging.conf`` and the overlays of ``common/recipes`` (pre-training
recipes a user stacks on ``pretrain.json``: ``--config_file "['configs/pretrain.json','configs/recipes/sgd.json']"``,
and fine-tuning recipes on ``train.json``) are copied, each with a bundle's own values of its keys from
``<bundle>/recipes/<recipe>.json`` merged over it; ``metadata.json`` and
``gcl_demo``'s ``demo.json`` are written in the bundles directly (see ``docs/architecture.md``, "One source for the
bundles").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from monai.bundle import ConfigParser

SOURCES = Path(__file__).resolve().parent
BUNDLES = SOURCES.parent / "bundles"


def _ordered(merged: dict, common: dict) -> dict:
    """
    ``merged`` with the common config's key order; a key only the bundle has goes just before the first key whose
    value refers to it (``@key``), else at the end, so that a reader meets it where it is first used.
    """
    extra = [k for k in merged if k not in common]
    out: dict = {}
    for key in common:
        for name in [k for k in extra if k not in out and f"@{k}" in json.dumps(merged[key])]:
            out[name] = merged[name]
        out[key] = merged[key]
    out.update((k, merged[k]) for k in extra if k not in out)
    return out


def config_text(content: dict) -> str:
    """``content`` as JSON indented by 4, a list of plain values on one line where it fits in 100 characters (as the
    model-zoo's configs write ``"keys": ["image", "label"]``)."""
    return _json(content, 0) + "\n"


def _json(value, indent: int) -> str:
    pad, inner = " " * indent, " " * (indent + 4)
    if isinstance(value, list) and not any(isinstance(v, (list, dict)) for v in value):
        flat = json.dumps(value)
        if indent + len(flat) <= 100:
            return flat
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {_json(v, indent + 4)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(inner + _json(v, indent + 4) for v in value) + f"\n{pad}]"
    return json.dumps(value)


def generated_configs(bundles: Path = BUNDLES) -> dict[Path, dict | str]:
    """Every generated config: its path under ``bundles`` and its content (each common config for every bundle;
    a JSON config as a dict, ``logging.conf`` as text)."""
    _check_recipe_values()
    out: dict[Path, dict | str] = {}
    for bundle in sorted(p for p in SOURCES.iterdir() if p.is_dir() and p.name != "common"):
        for common in sorted((SOURCES / "common").glob("*.conf")):
            out[bundles / bundle.name / "configs" / common.name] = common.read_text()  # logging.conf: copied
        for common in sorted((SOURCES / "common").glob("*.json")):
            values, content = bundle / common.name, json.loads(common.read_text())
            if values.is_file():
                # the multi-GPU configs are overrides of pretrain/train.json with keys such as "train#sampler":
                # they have no dataset values and are copied as they are
                content = _ordered(ConfigParser.load_config_files([str(common), str(values)]), content)
            out[bundles / bundle.name / "configs" / common.name] = content
        for overlay in sorted((SOURCES / "common" / "recipes").glob("*.json")):
            out[bundles / bundle.name / "configs" / "recipes" / overlay.name] = _recipe(overlay, bundle)
    return out


def _recipe(overlay: Path, bundle: Path) -> dict:
    """The recipe ``overlay`` for ``bundle``: the common recipe, with the bundle's own value of a recipe key from
    ``<bundle>/recipes/<recipe>.json`` merged over it (a value chosen on that data set's validation patients, such as
    ACDC's 192 x 192 grid for ``finetune_fullsup``)."""
    content, values = json.loads(overlay.read_text()), bundle / "recipes" / overlay.name
    if values.is_file():
        content = _ordered(ConfigParser.load_config_files([str(overlay), str(values)]), content)
    return content


def _check_recipe_values() -> None:
    """Refuse a bundle's recipe values with no common recipe to merge over (a misspelt name would be dropped)."""
    for values in sorted(SOURCES.glob("*/recipes/*.json")):
        if values.parent.parent.name != "common" and not (SOURCES / "common" / "recipes" / values.name).is_file():
            raise ValueError(f"{values}: no common recipe {values.name} in {SOURCES / 'common' / 'recipes'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a config is out of sync")
    parser.add_argument("--bundles", type=Path, default=BUNDLES, help="the bundles' folder (default: the repository's)")
    args = parser.parse_args(argv)
    stale = []
    for path, content in generated_configs(args.bundles).items():
        text = content if isinstance(content, str) else None
        if args.check:
            current = path.read_text() if path.is_file() else None
            if current is None or (current != text if text is not None else json.loads(current) != content):
                stale.append(path)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text if text is not None else config_text(content))
    for path in stale:
        print(f"{path} differs from its source in {SOURCES}; run python {Path(__file__).name}.", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
