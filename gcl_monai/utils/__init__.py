"""Helpers every layer may use (as ``monai.utils``): nothing here imports the rest of gcl_monai."""

from gcl_monai.utils.atomic import atomic_write

__all__ = ["atomic_write"]
