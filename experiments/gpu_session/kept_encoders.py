"""
The pre-trained encoders of a GPU session kept as encoder cards (:py:func:`gcl_monai.networks.keep_encoder`): each
finished pre-training's ``encoder.pt`` in bfloat16 (9.4 MB at the paper's width, 2.4 MB at half width) with its card
(recipe, seed, commit, probe Dice, architecture, SHA-256), so that later cells can fine-tune the same encoders on any
machine without pre-training again (docs/protocol_gpu_seeds.md, amendment 1).

On the device they are written into the work folder's ``encoders/<experiment>/<pre-training>.pt`` and ``.json``
(:py:func:`keep_encoders`), which the pack brings back inside its archive; on this side ``--collect`` copies them
into the run's results folder, ``docs/results/<run>/encoders/`` (:py:func:`collect_encoders`).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

from experiments.fingerprints import encoder_hash
from experiments.status import STATUS_FILE, read_status
from gcl_monai.networks import keep_encoder
from gcl_monai.networks.keep import last_probe

__all__ = ["ENCODERS", "collect_encoders", "keep_encoders", "keep_experiment_encoders"]

logger = logging.getLogger("experiments")

#: the folder of the work folder (and of a results folder) that holds the kept encoders
ENCODERS = "encoders"
#: a pre-training's folder name: ``<method>``, or ``<method>_p<pre-training seed>``
_PRETRAIN_NAME = re.compile(r"^(?P<method>.+?)(?:_p(?P<seed>\d+))?$")


def _commit(checkout: Path | None) -> str | None:
    """The commit of ``checkout`` (None outside a git checkout: a session's copy of the tree may have no history)."""
    if checkout is None:
        return None
    result = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def keep_encoders(work: Path, budget: str, checkout: Path | None = None) -> list[Path]:
    """
    Keeps the encoder of each finished pre-training of the work folder ``work`` as a card (see the module's
    description): :func:`keep_experiment_encoders` of each of its experiments, into ``encoders/<experiment>/``.

    Args:
        work: the run's work folder.
        budget: the run's budget, recorded on the card.
        checkout: the checkout that ran it (its commit recorded on the card; None: no commit).

    Returns:
        the kept weights, one ``.pt`` per encoder (each card beside it).
    """
    work = Path(work)
    kept = []
    for experiment in sorted({s.parents[2] for s in work.glob(f"results/*/pretrain/*/{STATUS_FILE}")}):
        kept += keep_experiment_encoders(experiment, work / ENCODERS / experiment.name, budget, checkout)
    return kept


def keep_experiment_encoders(experiment: Path, into: Path, budget: str, checkout: Path | None = None) -> list[Path]:
    """
    Keeps the encoder of each finished pre-training of the experiment folder ``experiment`` as a card in ``into``:
    ``<pre-training>.pt`` in bfloat16 and its ``.json`` (recipe and seed from the folder's name, the experiment,
    ``budget``, the commit of ``checkout``, the float32 encoder's SHA-256 and its last probe). A card already kept of
    the same ``encoder.pt`` is not written again.

    Returns:
        the kept weights, one ``.pt`` per encoder; an encoder that is no ``BasicUNet`` encoder gets no card (logged).
    """
    experiment, into = Path(experiment), Path(into)
    kept = []
    for status_file in sorted(experiment.glob(f"pretrain/*/{STATUS_FILE}")):
        folder, encoder = status_file.parent, status_file.parent / "encoder.pt"
        if read_status(folder).get("status") != "finished" or not encoder.exists():
            continue
        out = into / f"{folder.name}.pt"
        card = out.with_suffix(".json")
        fingerprint = encoder_hash(encoder)
        if not (out.exists() and card.exists() and json.loads(card.read_text()).get("encoder_sha256") == fingerprint):
            name = _PRETRAIN_NAME.match(folder.name)
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                keep_encoder(
                    encoder,
                    out,
                    recipe=name["method"],
                    seed=int(name["seed"] or 0),
                    experiment=experiment.name,
                    budget=budget,
                    commit=_commit(checkout),
                    encoder_sha256=fingerprint,
                    **last_probe(folder),
                )
            except (ValueError, RuntimeError) as error:  # not a BasicUNet encoder: the float32 one still comes back
                logger.warning("No card kept of %s: %s", encoder, error)
                continue
        kept.append(out)
    return kept


def collect_encoders(work: Path, into: Path) -> list[Path]:
    """
    Copies the kept encoders of the work folder ``work`` (weights and cards, of every experiment) into
    ``into/encoders/``.

    Returns:
        the files written.
    """
    written = []
    for path in sorted(Path(work).glob(f"{ENCODERS}/*/*")):
        if path.suffix in (".pt", ".json"):
            target = Path(into) / ENCODERS / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            written.append(target)
    return written
