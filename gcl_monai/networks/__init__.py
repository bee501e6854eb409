from .gcl_net import ENCODER_PREFIXES, GCLNet, ProjectionHead, trainable_parameters
from .slice_wise import SliceWise
