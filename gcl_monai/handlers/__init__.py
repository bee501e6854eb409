from .checkpoints import AtomicCheckpointSaver, latest_checkpoint
from .collapse import CollapseDetector, RepresentationCollapse
from .dice_summary import DiceSummary
from .distributed import BroadcastParameters, EpochLengthAdapter
from .encoder_export import EncoderExporter
from .epoch_seed import EpochSeedHandler
from .grad_mitigator_handler import GradMitigatorHandler
from .pace_handler import GradFilterPaceHandler
from .shrink_perturb import ShrinkPerturb
