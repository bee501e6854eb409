from .gcl_net import ENCODER_PREFIXES, GCLNet, ProjectionHead, trainable_parameters
from .slice_wise import SliceWise

__all__ = [
    "ENCODER_PREFIXES",
    "GCLNet",
    "ProjectionHead",
    "trainable_parameters",
    "SliceWise",
]
