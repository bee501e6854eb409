from gcl_monai.engines.gradient_contract import GradientCombinerHandler  # the handler of the gradient contract

from .checkpoints import AtomicCheckpointSaver, latest_checkpoint, remove_checkpoints
from .collapse import CollapseDetector, RepresentationCollapse
from .dice_summary import DiceSummary
from .distributed import BroadcastParameters, EpochLengthAdapter
from .embedding_spread import EmbeddingSpread
from .encoder_export import EncoderExporter
from .epoch_seed import EpochSeedHandler
from .pace_handler import GradFilterPaceHandler
from .shrink_perturb import ShrinkPerturb

__all__ = [
    "AtomicCheckpointSaver",
    "latest_checkpoint",
    "remove_checkpoints",
    "CollapseDetector",
    "RepresentationCollapse",
    "DiceSummary",
    "BroadcastParameters",
    "EpochLengthAdapter",
    "EmbeddingSpread",
    "EncoderExporter",
    "EpochSeedHandler",
    "GradientCombinerHandler",
    "GradFilterPaceHandler",
    "ShrinkPerturb",
]
