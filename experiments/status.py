"""
A cell's status file, ``benchmark.json`` in its folder: what its run says of itself (empty before its first run),
read and written whole (a write never leaves half a file).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gcl_monai.utils import atomic_write

__all__ = ["STATUS_FILE", "read_status", "write_status"]

STATUS_FILE = "benchmark.json"


def read_status(folder: Path) -> dict[str, Any]:
    path = Path(folder) / STATUS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def write_status(folder: Path, status: Mapping[str, Any]) -> None:
    with atomic_write(Path(folder) / STATUS_FILE) as partial:
        partial.write_text(json.dumps(dict(status), indent=1))
