"""gcl-monai: GCL (gradient-guided contrastive learning with multi-perspective meta labels) for MONAI."""

from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.losses import GradFilter, MetaContrastiveLoss, PixelContrastiveLoss, pace
from gcl_monai.networks import GCLNet

__version__ = "0.1.0"

__all__ = [
    "GCLNet",
    "GradFilter",
    "GradMitigator",
    "MeanCombiner",
    "MetaContrastiveLoss",
    "PixelContrastiveLoss",
    "pace",
    "__version__",
]
