from .consistency import (
    InterpolationConsistency,
    MeanTeacherConsistency,
    VirtualAdversarialLoss,
    sigmoid_rampup,
)
from .distributed import all_gather_with_grad, gather_two_view_batch
from .grad_filter import GradFilter, LastLayerJacobian, pace
from .meta_contrastive import LOSS_FORMS, MetaContrastiveLoss, chance_level, positive_mask
from .pixel_contrastive import PixelContrastiveLoss

__all__ = [
    "InterpolationConsistency",
    "MeanTeacherConsistency",
    "VirtualAdversarialLoss",
    "sigmoid_rampup",
    "all_gather_with_grad",
    "gather_two_view_batch",
    "GradFilter",
    "LastLayerJacobian",
    "pace",
    "LOSS_FORMS",
    "MetaContrastiveLoss",
    "chance_level",
    "positive_mask",
    "PixelContrastiveLoss",
]
