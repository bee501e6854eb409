"""
``python -m experiments.gpu_session``: the paper's comparison on one time-limited GPU session, within its session terms
(docs/gpu_run.md): the speed benchmark, a diagnosis of the default recipe that stops a collapsing or stalling run,
pre-training and fine-tuning through the benchmark harness, run by a detached worker; each call brings back what is
done in a few files, and a fresh machine resumes from them. ``--rehearse`` runs the same on a CPU at tiny sizes.
"""

from experiments.gpu_session.budget import BUDGETS, GpuRunBudget, get_budget
from experiments.gpu_session.pack import pack, unpack
from experiments.gpu_session.terms import TERMS, SessionTerms, returned_violations, travel_bytes

__all__ = [
    "BUDGETS",
    "TERMS",
    "GpuRunBudget",
    "SessionTerms",
    "get_budget",
    "pack",
    "returned_violations",
    "travel_bytes",
    "unpack",
]
