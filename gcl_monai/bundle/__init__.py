"""What a bundle config calls before its workflow runs: the split file and synthetic dataset it needs
(:mod:`~gcl_monai.bundle.data_setup`), the checks of its switches and the float32 matrix-product precision
(:mod:`~gcl_monai.bundle.run_options`)."""

from gcl_monai.bundle.data_setup import ensure_phantom, load_or_create_split
from gcl_monai.bundle.run_options import MATMUL_PRECISIONS, check_switches, set_float32_matmul_precision

__all__ = [
    "MATMUL_PRECISIONS",
    "check_switches",
    "ensure_phantom",
    "load_or_create_split",
    "set_float32_matmul_precision",
]
