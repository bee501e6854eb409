"""Diagnosis of a pre-training recipe: do the image-wise objectives train, collapse or stall?"""

from .recorder import TrajectoryRecorder
from .summary import DiagnosisSummary, summarise, write_diagnosis
from .weights import effective_rank, encoder_weight_ranks

__all__ = [
    "TrajectoryRecorder",
    "DiagnosisSummary",
    "summarise",
    "write_diagnosis",
    "effective_rank",
    "encoder_weight_ranks",
]
