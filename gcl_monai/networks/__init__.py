from .encoder_card import keep_encoder, pretrained_encoder, restore_encoder
from .gcl_net import ENCODER_PREFIXES, GCLNet, ProjectionHead, trainable_parameters
from .slice_wise import SliceWise

__all__ = [
    "ENCODER_PREFIXES",
    "GCLNet",
    "ProjectionHead",
    "trainable_parameters",
    "SliceWise",
    "keep_encoder",
    "pretrained_encoder",
    "restore_encoder",
]
