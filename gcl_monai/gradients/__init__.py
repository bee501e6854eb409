"""
Combiners of the per-meta-label gradients: GradMitigator (Algorithm 1 of GCL, vectorised), its literal reference
(:py:mod:`gcl_monai.gradients.algorithm1`) and the plain average. How the gradients reach a combiner and then
``param.grad`` during pre-training: :py:mod:`gcl_monai.engines.gradient_contract`.
"""

from gcl_monai.gradients.combiner import GradientCombiner
from gcl_monai.gradients.grad_mitigator import GradMitigator
from gcl_monai.gradients.mean_combiner import MeanCombiner

__all__ = ["GradientCombiner", "GradMitigator", "MeanCombiner"]
