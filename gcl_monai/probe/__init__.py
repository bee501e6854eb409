"""The frozen-encoder probe: the segmentation quality of an encoder's representation, in minutes on a CPU."""

from gcl_monai.probe.data import load_probe_volumes, patient_folds, patient_groups
from gcl_monai.probe.evaluate import ProbeSettings, evaluate_encoder, summarise
from gcl_monai.probe.features import BN_STATS, EncoderMismatch, FrozenEncoder, recompute_batch_norm
from gcl_monai.probe.handler import ProbeHandler
from gcl_monai.probe.linear import ProbeVolume, fit_probe, sample_pixels, score_probe

__all__ = [
    "BN_STATS",
    "EncoderMismatch",
    "FrozenEncoder",
    "ProbeHandler",
    "ProbeSettings",
    "ProbeVolume",
    "evaluate_encoder",
    "fit_probe",
    "load_probe_volumes",
    "patient_folds",
    "patient_groups",
    "recompute_batch_norm",
    "sample_pixels",
    "score_probe",
    "summarise",
]
