"""The compared methods (bundle overrides of ``pretrain.json``) and the benchmark presets."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALL_LABELLED",
    "ALL_METHODS",
    "METHODS",
    "PRESETS",
    "PRETRAINING_METHODS",
    "SEMI_SUPERVISED_METHODS",
    "Method",
    "Preset",
    "UnsupportedMethod",
    "finetune_iteration_overrides",
    "get_preset",
    "preset_cuts",
]

#: meta labels value meaning "every meta label of the dataset" (the bundle's own ``meta_labels`` list).
ALL = "all"


class UnsupportedMethod(ValueError):
    """Raised when a method needs a meta label that the dataset does not have (e.g. ``organ_state`` on prostate)."""


@dataclass(frozen=True)
class Method:
    """
    One row of the paper's tables, as overrides of the bundles.

    Args:
        name: method id (``--methods``).
        label: row label in the Markdown table (the paper's wording).
        meta_labels: meta labels of the method's own pre-training (``(None,)`` is SimCLR's positives, ``"all"``
            every meta label of the dataset); None when it has no pre-training of its own.
        pixel_branch: use the pixel-wise contrastive loss (PixCL).
        grad_filter: screen the pixel pairs with GradFilter.
        mitigate: combine the per-meta-label gradients with GradMitigator (else their mean).
        encoder_of: another method whose pre-trained encoder this one fine-tunes (shared pre-training).
        freeze_encoder: fine-tune the decoder only.
        recipe: the pre-training recipe of the bundles (``"gcl"``: the project's default, ``"paper"``: Eq. 1
            and Algorithm 1 as written, see docs/recipe.md); the Table 4 ablations remove components from it.
        semi_supervised: the semi-supervised fine-tuning of Table 3 (``train.json``'s ``semi_supervised``:
            ``"vat"``, ``"mean_teacher"`` or ``"mixup"``), combined with any initialisation.
        fully_supervised: fine-tune with every training patient labelled (Table 3's last row): one cell per repeat
            at L = :data:`ALL_LABELLED` instead of one per L.
        shrink_perturb: ``(shrink, perturb)`` applied to a loaded pre-trained encoder before fine-tuning
            (``train.json``'s ``shrink_perturb``, Ash & Adams 2020, docs/finetuning.md); None fine-tunes the loaded
            weights as they are, as the paper and the bundles' default do.
        supervised_pretraining: the encoder comes from a U-Net trained, with the preset's fine-tuning settings, on
            every training patient labelled (the fully supervised row's training, run once): a reference for how
            far any initialisation learnt on these patients could lift the few-label Dice, not a method of the paper.
    """

    name: str
    label: str
    meta_labels: tuple[str | None, ...] | str | None
    pixel_branch: bool = False
    grad_filter: bool = False
    mitigate: bool = False
    encoder_of: str | None = None
    freeze_encoder: bool = False
    recipe: str = "gcl"
    semi_supervised: str | None = None
    fully_supervised: bool = False
    shrink_perturb: tuple[float, float] | None = None
    supervised_pretraining: bool = False

    @property
    def pretrain_method(self) -> str | None:
        """The pre-training run this method fine-tunes from (None: random initialisation)."""
        own = self.meta_labels is not None or self.supervised_pretraining
        return self.encoder_of or (self.name if own else None)

    def pretrain_overrides(self, dataset_meta_labels: Sequence[str]) -> dict[str, Any]:
        """
        Overrides of ``pretrain.json`` for this method's own pre-training.

        Args:
            dataset_meta_labels: the dataset's meta labels (the bundle's ``meta_labels``).

        Raises:
            ValueError: the method has no pre-training of its own.
            UnsupportedMethod: a meta label is not one of the dataset's.
        """
        if self.meta_labels is None:
            raise ValueError(f"method {self.name!r} has no contrastive pre-training of its own.")
        labels = list(dataset_meta_labels) if self.meta_labels == ALL else list(self.meta_labels)
        missing = [m for m in labels if m is not None and m not in dataset_meta_labels]
        if missing:
            raise UnsupportedMethod(
                f"method {self.name!r} needs meta labels {missing}, not in {list(dataset_meta_labels)}."
            )
        return {
            "method": self.name,
            "meta_labels": labels,
            "pixel_branch": self.pixel_branch,
            "grad_filter_enabled": self.pixel_branch and self.grad_filter,
            "mitigate": self.mitigate,
            "recipe": self.recipe,
        }

    def finetune_overrides(self) -> dict[str, Any]:
        """Overrides of ``train.json`` for this method (the initialisation is set per cell)."""
        out: dict[str, Any] = {"freeze_encoder": self.freeze_encoder}
        if self.semi_supervised is not None:
            out["semi_supervised"] = self.semi_supervised
        if self.fully_supervised:
            out["labeled"] = "$@split['pretrain'] + @split['train']"
        if self.shrink_perturb is not None:
            out["shrink_perturb"] = list(self.shrink_perturb)
        return out


#: shrink and perturb of the ``*_sp`` rows: ``0.5 w + 1.0 w0`` (the value chosen on ACDC validation at Adam 1e-3)
SHRINK_PERTURB = (0.5, 1.0)

#: ``num_labeled`` of a fully supervised cell: every training patient labelled (shown as "all" in the tables).
ALL_LABELLED = 0

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("random", "Random Init.", None),
        Method("simclr", "SimCLR (Base)", (None,)),
        Method("meta_patient", "Base + Patient_ID (m=1)", ("patient_id",)),
        Method("meta_quantile", "Base + Slice_quantile (m=2)", ("slice_quantile",)),
        Method("meta_state", "Base + Organ_state (m=3)", ("organ_state",)),
        Method("multi_meta", "Base + multi-meta labels", ALL),
        Method("multi_meta_mitigator", "Base + multi-meta labels + GradMiti.", ALL, mitigate=True),
        Method("pixcl", "Base + PixCL", (None,), pixel_branch=True),
        Method("pixcl_gradfilter", "Base + PixCL + GradFilter", (None,), pixel_branch=True, grad_filter=True),
        Method("gcl_frozen", "Full model (frozen)", None, encoder_of="gcl", freeze_encoder=True),
        Method("gcl", "GCL (full model)", ALL, pixel_branch=True, grad_filter=True, mitigate=True),
        Method(
            "gcl_paper",
            "GCL (paper-literal recipe)",
            ALL,
            pixel_branch=True,
            grad_filter=True,
            mitigate=True,
            recipe="paper",
        ),
        # Table 3: semi-supervised fine-tuning, alone and on the GCL encoder, and full supervision
        Method("vat", "Adv. Training", None, semi_supervised="vat"),
        Method("mean_teacher", "Mean Teacher", None, semi_supervised="mean_teacher"),
        Method("mixup", "Mixup", None, semi_supervised="mixup"),
        Method("gcl_mixup", "Ours + Mixup", None, encoder_of="gcl", semi_supervised="mixup"),
        Method("gcl_mean_teacher", "Ours + M.T.", None, encoder_of="gcl", semi_supervised="mean_teacher"),
        Method("fully_supervised", "Fully Superv.", None, fully_supervised=True),
        # pre-trained encoders shrunk and perturbed before fine-tuning (a measured option, not the paper's fine-tuning)
        Method(
            "simclr_sp", "SimCLR (Base), shrink and perturb", None, encoder_of="simclr", shrink_perturb=SHRINK_PERTURB
        ),
        Method("gcl_sp", "GCL (full model), shrink and perturb", None, encoder_of="gcl", shrink_perturb=SHRINK_PERTURB),
        # a reference beside Table 1: the encoder of the fully supervised U-Net, fine-tuned like the others
        Method("supervised_encoder", "Fully superv. encoder (reference)", None, supervised_pretraining=True),
        Method(
            "supervised_encoder_sp",
            "Fully superv. encoder (reference), shrink and perturb",
            None,
            encoder_of="supervised_encoder",
            shrink_perturb=SHRINK_PERTURB,
        ),
    )
}
#: the rows of Tables 1 and 4 (pre-training methods and ablations) and of Table 3 (semi-supervised fine-tuning)
PRETRAINING_METHODS = (
    "random",
    "simclr",
    "meta_patient",
    "meta_quantile",
    "meta_state",
    "multi_meta",
    "multi_meta_mitigator",
    "pixcl",
    "pixcl_gradfilter",
    "gcl_frozen",
    "gcl",
    "gcl_paper",
)
SEMI_SUPERVISED_METHODS = (
    "random",
    "vat",
    "mean_teacher",
    "mixup",
    "gcl",
    "gcl_mixup",
    "gcl_mean_teacher",
    "fully_supervised",
)
ALL_METHODS = tuple(METHODS)


@dataclass(frozen=True)
class Preset:
    """
    A benchmark protocol: which cells to run and the bundle overrides of each stage.

    ``common`` overrides go to every bundle (pre-training, fine-tuning, evaluation), ``pretrain`` to
    ``pretrain.json`` and ``finetune`` to ``train.json``. The fine-tuning ``iterations_per_epoch`` None means one pass
    over the labelled slices per epoch (the paper's epochs); the runner computes it per labelled draw.

    Args:
        name: preset id.
        methods: method ids, in table order.
        num_labeled: the values of L (labelled patients).
        repeats: labelled draws (different labelled subsets, the same for every method).
        seeds_per_draw: fine-tuning seeds per draw.
        pretrain_seeds: the seeds of each method's pre-training (every pre-trained method is fine-tuned from each of
            them on the same draws): the spread of a method over its pre-training runs, not of one encoder.
        common, pretrain, finetune: bundle overrides.
        device: torch device string, None for the bundles' default (CUDA when available).
    """

    name: str
    methods: tuple[str, ...]
    num_labeled: tuple[int, ...]
    repeats: int
    seeds_per_draw: int = 1
    pretrain_seeds: tuple[int, ...] = (0,)
    common: Mapping[str, Any] = field(default_factory=dict)
    pretrain: Mapping[str, Any] = field(default_factory=dict)
    finetune: Mapping[str, Any] = field(default_factory=dict)
    device: str | None = None

    def replace(self, **changes: Any) -> Preset:
        """A copy with some fields changed; dict fields given in ``changes`` are merged into the current ones."""
        for key in ("common", "pretrain", "finetune"):
            if key in changes:
                changes[key] = {**getattr(self, key), **changes[key]}
        unknown = [m for m in changes.get("methods", ()) if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; choose from {list(METHODS)}.")
        return dataclasses.replace(self, **changes)


def finetune_iteration_overrides(iterations: int, iterations_per_epoch: int | None = 50) -> dict[str, int]:
    """
    Fine-tuning ``epochs`` and ``iterations_per_epoch`` giving about ``iterations`` iterations in total.

    Args:
        iterations: total number of fine-tuning iterations wanted.
        iterations_per_epoch: iterations between two validations (None: 50).
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}.")
    per_epoch = min(iterations_per_epoch or 50, iterations)
    return {"epochs": math.ceil(iterations / per_epoch), "iterations_per_epoch": per_epoch}


PAPER = Preset(
    name="paper",
    methods=PRETRAINING_METHODS,
    num_labeled=(1, 2, 8),
    repeats=5,
    common={"features": [32, 64, 128, 256, 512, 32]},
    pretrain={
        "batch_size": 48,
        "optimizer_name": "sgd",
        "lr": 0.1,
        "epochs": 300,
        "temperature": 0.1,
        "topk_ratio": 0.3,
        "beta": 0.01,
    },
    finetune={"batch_size": 5, "lr": 1e-4, "epochs": 300, "iterations_per_epoch": None},
)

CPU_MINI = Preset(
    name="cpu-mini",
    methods=("random", "simclr", "gcl", "gcl_paper"),
    num_labeled=(1, 2),
    repeats=4,
    common={"image_size": [128, 128], "features": [16, 32, 64, 128, 256, 16]},
    pretrain={
        "batch_size": 16,
        "optimizer_name": "adam",
        "lr": 1e-4,
        "epochs": 20,
        "temperature": 0.1,
        "topk_ratio": 0.3,
        "beta": 0.01,
    },
    finetune={"batch_size": 8, "lr": 1e-3, "epochs": 5, "iterations_per_epoch": 50, "val_interval": 1},
)

CPU_ABLATION = CPU_MINI.replace(name="cpu-ablation", methods=PRETRAINING_METHODS)
#: Table 3: the semi-supervised methods, GCL combined with them and the fully supervised row
CPU_SEMI = CPU_MINI.replace(name="cpu-semi", methods=SEMI_SUPERVISED_METHODS)
PAPER_SEMI = PAPER.replace(name="paper-semi", methods=SEMI_SUPERVISED_METHODS)

#: docs/protocol.md, pre-registered: GCL, SimCLR and the positive control (an encoder trained with the training
#: patients' labels) against random initialisation, 3 pre-training seeds each, 8 paired draws from every training
#: patient, L = 2 (primary) and 1, at the bundles' fine-tuning budget (1000 iterations) and recipe; 12 validation
#: patients (stage B chooses on them), 20 test patients
CPU_PROTOCOL = CPU_MINI.replace(
    name="cpu-protocol",
    methods=("random", "simclr", "gcl", "supervised_encoder"),
    num_labeled=(2, 1),
    repeats=8,
    pretrain_seeds=(0, 1, 2),
    common={"num_pretrain": 40, "num_val": 12, "num_test": 20},
    finetune={"epochs": 20, "iterations_per_epoch": 50, "val_interval": 5, "labeled_pool": "train+pretrain"},
)

#: docs/protocol_prostate.md: the same design on the 31 NCI-ISBI prostate cases: 13 pre-training, 4 in the fine-tuning
#: pool (labelled cases are drawn from all 17 training cases), 6 validation, 8 test
CPU_PROTOCOL_PROSTATE = CPU_PROTOCOL.replace(
    name="cpu-protocol-prostate", common={"num_pretrain": 13, "num_val": 6, "num_test": 8}
)

#: docs/protocol_converged.md (amendment 4): the protocol's design at L = 2 with the few-label recipe of the bundles
#: (``configs/recipes/finetune_fewlabel.json``: batch 20, Adam 1e-3, cosine over 1500 iterations validated every 250
#: with the best kept, the ``bilinear`` export without mirroring), in 50-iteration epochs as the random gates ran it
#: (docs/results/gate-random_acdc), channels-last float32. Named after its protocol: the baseline it gives misses the
#: gates, so its report says "over a baseline that has not converged" (amendment 4)
CPU_CONVERGED = CPU_PROTOCOL.replace(
    name="cpu-converged",
    num_labeled=(2,),
    finetune={
        "batch_size": 20,
        "lr": 1e-3,
        "epochs": 30,
        "iterations_per_epoch": 50,
        "val_interval": 5,
        "pred_interp": "bilinear",
        "mirror_axes": [],
        "channels_last": True,
    },
)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (CPU_MINI, CPU_ABLATION, CPU_SEMI, CPU_PROTOCOL, CPU_PROTOCOL_PROSTATE, CPU_CONVERGED, PAPER, PAPER_SEMI)
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {list(PRESETS)}.")
    return PRESETS[name]


def _show(value: Any) -> str:
    if value is None:
        return "one pass over the labelled slices"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ")"
    return str(value)


def preset_cuts(preset: Preset, reference: Preset = PAPER) -> list[str]:
    """
    What ``preset`` changes relative to the paper's protocol (``reference``), one line per difference; settings
    the paper does not state (absent from ``reference``) are listed as such.
    """
    cuts = []
    missing = [m for m in reference.methods if m not in preset.methods]
    if missing:
        cuts.append(f"methods: {', '.join(preset.methods)} (left out: {', '.join(missing)})")
    counts = (("num_labeled", "L"), ("repeats", "repeats (labelled draws)"), ("seeds_per_draw", "seeds per draw"))
    for attr, what in counts:
        ours, paper = getattr(preset, attr), getattr(reference, attr)
        if ours != paper:
            cuts.append(f"{what}: {_show(ours)} (paper: {_show(paper)})")
    for stage in ("common", "pretrain", "finetune"):
        ours, paper = getattr(preset, stage), getattr(reference, stage)
        for key in sorted(set(ours) | set(paper)):
            if key not in paper:
                cuts.append(f"{stage} {key}: {_show(ours[key])} (not stated in the paper)")
            elif ours.get(key, "bundle default") != paper[key]:
                cuts.append(f"{stage} {key}: {_show(ours.get(key, 'bundle default'))} (paper: {_show(paper[key])})")
    return cuts
