"""
Writes the bundles' configs from one source: ``bundle_sources/common/<config>`` (the workflow, written once) merged
with ``bundle_sources/<bundle>/<config>`` (that bundle's dataset values) by MONAI's own multi-file merge
(``ConfigParser.load_config_files``: later files override top-level keys, ``a#b`` keys reach into nested ones).
Each bundle stays a self-contained folder of complete configs, so every documented command, override, MONAI Label
and the ``monai.bundle`` tools work on it unchanged, also after it is copied elsewhere.

    python bundle_sources/generate.py          # rewrite bundles/<bundle>/configs/<config> from the sources
    python bundle_sources/generate.py --check  # exit 1 and name the configs that differ from their sources

Only the configs that have a source are generated (see ``docs/architecture.md``, "One source for the bundles").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from monai.bundle import ConfigParser

SOURCES = Path(__file__).resolve().parent
BUNDLES = SOURCES.parent / "bundles"


def generated_configs(bundles: Path = BUNDLES) -> dict[Path, dict]:
    """Every generated config: its path under ``bundles`` and its content."""
    out = {}
    for bundle in sorted(p for p in SOURCES.iterdir() if p.is_dir() and p.name != "common"):
        for values in sorted(bundle.glob("*.json")):
            merged = ConfigParser.load_config_files([str(SOURCES / "common" / values.name), str(values)])
            out[bundles / bundle.name / "configs" / values.name] = merged
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a config is out of sync")
    parser.add_argument("--bundles", type=Path, default=BUNDLES, help="the bundles' folder (default: the repository's)")
    args = parser.parse_args(argv)
    stale = []
    for path, content in generated_configs(args.bundles).items():
        if args.check:
            if not path.is_file() or json.loads(path.read_text()) != content:
                stale.append(path)
        else:
            path.write_text(json.dumps(content, indent=4) + "\n")
    for path in stale:
        print(f"{path} differs from its source in {SOURCES}; run python {Path(__file__).name}.", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
