from .autocast import AutocastInferer
from .gradient_contract import GCLEvents, GradientCombinerHandler, TaskGradients, task_gradients
from .inference import CasesFailed, segment_each_case
from .mirrored import MirroredInferer
from .pretrainer import SIMCLR_TASK, GCLPretrainer
from .semi_supervised import SEMI_SUPERVISED_METHODS, SemiSupervisedTrainer

__all__ = [
    "AutocastInferer",
    "GCLEvents",
    "TaskGradients",
    "GradientCombinerHandler",
    "task_gradients",
    "CasesFailed",
    "segment_each_case",
    "MirroredInferer",
    "SIMCLR_TASK",
    "GCLPretrainer",
    "SEMI_SUPERVISED_METHODS",
    "SemiSupervisedTrainer",
]
