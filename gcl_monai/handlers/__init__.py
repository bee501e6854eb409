from .encoder_export import EncoderExporter
from .epoch_seed import EpochSeedHandler
from .grad_mitigator_handler import GradMitigatorHandler
from .pace_handler import GradFilterPaceHandler
