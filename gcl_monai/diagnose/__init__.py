"""Diagnosis of a pre-training recipe: do the image-wise objectives train, collapse or stall?"""

from .embeddings import alignment, embedding_rank, representation_measures, uniformity
from .recorder import TrajectoryRecorder
from .summary import DiagnosisSummary, summarise, write_diagnosis
from .weights import effective_rank, encoder_weight_ranks

__all__ = [
    "TrajectoryRecorder",
    "DiagnosisSummary",
    "summarise",
    "write_diagnosis",
    "alignment",
    "embedding_rank",
    "representation_measures",
    "uniformity",
    "effective_rank",
    "encoder_weight_ranks",
]
