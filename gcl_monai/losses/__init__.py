from .grad_filter import GradFilter, LastLayerJacobian, pace
from .meta_contrastive import MetaContrastiveLoss, positive_mask
from .pixel_contrastive import PixelContrastiveLoss
