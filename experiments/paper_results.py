"""
The paper's Dice results (mean and standard deviation over its 5 runs), to print next to this project's: Table 1
(pre-training methods), Table 3 (semi-supervised methods) and Table 4 (ablations) of Wu et al., "GCL: Gradient-Guided
Contrastive Learning for Medical Image Segmentation with Multi-Perspective Meta Labels", ACM MM 2023.

Keys are this project's method ids (``experiments.presets.METHODS``) and values of L; the fully supervised
row is under ``"all"`` with the number of labelled patients the paper used.
"""

from __future__ import annotations

__all__ = ["PAPER_DICE", "FULLY_SUPERVISED_L", "paper_dice"]

#: L of the paper's fully supervised row (Table 3), per dataset.
FULLY_SUPERVISED_L = {"acdc": 50, "prostate": 18, "mmwhs": 10}

_L = (1, 2, 8)


def _row(*values: tuple[float, float]) -> dict[int, tuple[float, float]]:
    return dict(zip(_L, values))


#: dataset -> method id -> L (1, 2, 8, or "all") -> (mean Dice, std).
PAPER_DICE: dict[str, dict[str, dict[int | str, tuple[float, float]]]] = {
    "acdc": {
        "random": _row((0.598, 0.023), (0.682, 0.012), (0.847, 0.008)),
        "simclr": _row((0.629, 0.037), (0.731, 0.022), (0.853, 0.017)),
        "meta_patient": _row((0.631, 0.024), (0.747, 0.019), (0.863, 0.018)),
        "meta_quantile": _row((0.688, 0.020), (0.784, 0.013), (0.880, 0.012)),
        "meta_state": _row((0.672, 0.018), (0.783, 0.018), (0.873, 0.009)),
        "multi_meta": _row((0.681, 0.022), (0.784, 0.020), (0.878, 0.017)),
        "multi_meta_mitigator": _row((0.709, 0.019), (0.804, 0.018), (0.894, 0.012)),
        "pixcl": _row((0.635, 0.024), (0.747, 0.022), (0.860, 0.018)),
        "pixcl_gradfilter": _row((0.652, 0.020), (0.775, 0.019), (0.871, 0.014)),
        "gcl_frozen": _row((0.709, 0.011), (0.797, 0.007), (0.882, 0.006)),
        "gcl": _row((0.729, 0.014), (0.812, 0.009), (0.905, 0.007)),
        "vat": _row((0.662, 0.012), (0.749, 0.013), (0.849, 0.007)),
        "mean_teacher": _row((0.674, 0.012), (0.771, 0.007), (0.857, 0.004)),
        "mixup": _row((0.667, 0.009), (0.773, 0.010), (0.862, 0.005)),
        "gcl_mixup": _row((0.754, 0.007), (0.833, 0.008), (0.911, 0.002)),
        "gcl_mean_teacher": _row((0.762, 0.010), (0.842, 0.008), (0.913, 0.002)),
        "fully_supervised": {"all": (0.914, 0.003)},
    },
    "prostate": {
        "random": _row((0.477, 0.039), (0.547, 0.027), (0.645, 0.013)),
        "simclr": _row((0.519, 0.049), (0.578, 0.033), (0.663, 0.022)),
        "meta_patient": _row((0.527, 0.032), (0.589, 0.020), (0.678, 0.022)),
        "meta_quantile": _row((0.573, 0.027), (0.617, 0.019), (0.688, 0.024)),
        "multi_meta": _row((0.574, 0.023), (0.614, 0.018), (0.685, 0.012)),
        "multi_meta_mitigator": _row((0.592, 0.030), (0.623, 0.028), (0.692, 0.014)),
        "pixcl": _row((0.545, 0.028), (0.593, 0.027), (0.663, 0.019)),
        "pixcl_gradfilter": _row((0.562, 0.024), (0.612, 0.028), (0.679, 0.017)),
        "gcl_frozen": _row((0.593, 0.014), (0.617, 0.012), (0.684, 0.008)),
        "gcl": _row((0.606, 0.019), (0.631, 0.013), (0.701, 0.012)),
        "vat": _row((0.544, 0.023), (0.587, 0.020), (0.681, 0.010)),
        "mean_teacher": _row((0.526, 0.014), (0.557, 0.008), (0.657, 0.004)),
        "mixup": _row((0.531, 0.017), (0.598, 0.012), (0.677, 0.008)),
        "gcl_mixup": _row((0.612, 0.012), (0.633, 0.014), (0.713, 0.002)),
        "gcl_mean_teacher": _row((0.614, 0.014), (0.643, 0.008), (0.711, 0.005)),
        "fully_supervised": {"all": (0.703, 0.005)},
    },
    "mmwhs": {
        "random": _row((0.443, 0.017), (0.623, 0.012), (0.792, 0.008)),
        "simclr": _row((0.489, 0.022), (0.667, 0.018), (0.799, 0.009)),
        "meta_patient": _row((0.529, 0.020), (0.684, 0.012), (0.799, 0.002)),
        "meta_quantile": _row((0.549, 0.013), (0.683, 0.014), (0.801, 0.007)),
        "multi_meta": _row((0.548, 0.023), (0.684, 0.021), (0.802, 0.014)),
        "multi_meta_mitigator": _row((0.559, 0.017), (0.697, 0.013), (0.811, 0.008)),
        "pixcl": _row((0.513, 0.022), (0.685, 0.017), (0.793, 0.014)),
        "pixcl_gradfilter": _row((0.536, 0.019), (0.694, 0.016), (0.803, 0.009)),
        "gcl_frozen": _row((0.563, 0.011), (0.694, 0.008), (0.809, 0.006)),
        "gcl": _row((0.572, 0.010), (0.709, 0.008), (0.819, 0.005)),
        "vat": _row((0.531, 0.018), (0.679, 0.012), (0.790, 0.007)),
        "mean_teacher": _row((0.538, 0.012), (0.692, 0.008), (0.809, 0.004)),
        "mixup": _row((0.549, 0.014), (0.683, 0.013), (0.797, 0.009)),
        "gcl_mixup": _row((0.621, 0.007), (0.722, 0.008), (0.822, 0.003)),
        "gcl_mean_teacher": _row((0.628, 0.008), (0.731, 0.005), (0.828, 0.005)),
        "fully_supervised": {"all": (0.812, 0.009)},
    },
}


def paper_dice(dataset: str, method: str, num_labeled: int | str) -> tuple[float, float] | None:
    """The paper's (mean, std) Dice of ``method`` on ``dataset`` at ``num_labeled``, None where it reports none
    (e.g. the Organ_state ablation on prostate, or a method of this project only such as ``gcl_paper``)."""
    return PAPER_DICE.get(dataset, {}).get(method, {}).get(num_labeled)
