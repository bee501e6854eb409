"""Combiners of the per-meta-label gradients: GradMitigator (Algorithm 1 of GCL) and the plain average."""

from gcl_monai.gradients.combiner import GradientCombiner
from gcl_monai.gradients.grad_mitigator import GradMitigator
from gcl_monai.gradients.mean_combiner import MeanCombiner, SumCombiner

__all__ = ["GradientCombiner", "GradMitigator", "MeanCombiner", "SumCombiner"]
