from .events import GCLEvents
from .pretrainer import SIMCLR_TASK, GCLPretrainer
from .semi_supervised import SEMI_SUPERVISED_METHODS, SemiSupervisedTrainer
