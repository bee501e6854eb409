"""Helpers every layer may use (as ``monai.utils``): nothing here imports the rest of gcl_monai."""

import importlib

from gcl_monai.utils.atomic import atomic_write

__all__ = ["atomic_write", "compact_png", "save_figure"]

# imported on first use: the figures (so that `python -m gcl_monai.utils.figures` runs it only once)
_LAZY_EXPORTS = {"compact_png": "figures", "save_figure": "figures"}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(f"gcl_monai.utils.{_LAZY_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
