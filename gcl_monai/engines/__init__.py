from .events import GCLEvents
from .pretrainer import SIMCLR_TASK, GCLPretrainer
