"""Combiners of the per-meta-label gradients: GradMitigator (Algorithm 1 of GCL) and the plain average."""

from gcl_monai.gradients.backward import task_gradients
from gcl_monai.gradients.combiner import GradientCombiner
from gcl_monai.gradients.grad_mitigator import GradMitigator
from gcl_monai.gradients.mean_combiner import MeanCombiner

__all__ = ["GradientCombiner", "GradMitigator", "MeanCombiner", "task_gradients"]
