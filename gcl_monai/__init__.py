"""gcl-monai: GCL (gradient-guided contrastive learning with multi-perspective meta labels) for MONAI."""

__version__ = "0.1.0"
