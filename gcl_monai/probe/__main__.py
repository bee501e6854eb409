"""
The frozen-encoder probe of an encoder file, a bundle's data and split:

    python -m gcl_monai.probe --config_file bundles/gcl_acdc/configs/pretrain.json --dataset_dir /data/acdc \\
        --encoder bundles/gcl_acdc/outputs/pretrain/gcl/encoder.pt --output_dir probe/gcl [--eval cv|test] \\
        [--encoder_seed 0] [--<bundle key> <value> ...]

``--encoder random`` probes a randomly initialised encoder (``--encoder_seed``). ``--eval cv`` (the default)
cross-validates over the training patients (pre-training and fine-tuning pools), the figure to choose on; ``--eval
test`` fits on the training patients and scores the test patients, for the final report only. Every other
``--key value`` is a bundle override, as with ``python -m monai.bundle run`` (the probe's settings are the bundle's
``probe_*`` values, e.g. ``--probe_folds 5``). Writes ``<output_dir>/probe.json``: the mean and per-class Dice, per
volume and per fold, the patients fitted and scored, the settings and the encoder.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import fire
import torch
from monai.bundle import ConfigParser

from gcl_monai.probe.evaluate import evaluate_encoder
from gcl_monai.probe.features import FrozenEncoder
from gcl_monai.utils import atomic_write

__all__ = ["probe_command"]

logger = logging.getLogger("gcl_monai.probe")

EVAL_MODES = ("cv", "test")


def probe_command(
    config_file: str, encoder: str, output_dir: str, eval: str = "cv", encoder_seed: int = 0, **override
) -> dict:
    """
    Runs the probe (see the module's docstring) and returns what it writes to ``probe.json``.

    Raises:
        ValueError: ``eval`` not one of :py:data:`EVAL_MODES`; a config without the ``probe`` section.
        gcl_monai.probe.EncoderMismatch: a missing encoder file or one that does not fit the bundle's network.
    """
    if eval not in EVAL_MODES:
        raise ValueError(f"--eval must be one of {EVAL_MODES}, got {eval!r}.")
    parser = ConfigParser()
    parser.read_config(config_file)
    parser.update(override)
    if "probe" not in parser.config:
        raise ValueError(f"{config_file} has no 'probe' section: a pretrain.json of this version's bundles is needed.")
    features, norm = parser.get_parsed_content("features"), parser.get_parsed_content("norm")
    settings = parser.get_parsed_content("probe#settings")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(encoder_seed)
        frozen = FrozenEncoder(features, norm, settings.grid)
    if encoder != "random":
        frozen.load_file(encoder)
    volumes = parser.get_parsed_content("probe#volumes")
    test = parser.get_parsed_content("probe#test_volumes") if eval == "test" else None
    result = evaluate_encoder(
        frozen,
        volumes,
        parser.get_parsed_content("probe_num_classes"),
        parser.get_parsed_content("probe_class_names"),
        test_volumes=test,
        settings=settings,
        groups=parser.get_parsed_content("probe#groups"),
    )
    result = {
        "encoder": encoder,
        "encoder_seed": encoder_seed if encoder == "random" else None,
        "config_file": config_file,
        "overrides": {k: str(v) for k, v in override.items()},
        **result,
    }
    out = Path(output_dir)
    with atomic_write(out / "probe.json") as partial:
        partial.write_text(json.dumps(result, indent=1))
    print(
        f"probe Dice ({result['settings']['mode']}, {result['num_volumes']} volumes): {result['dice']:.4f} "
        + " ".join(f"{k} {v:.3f}" for k, v in result["dice_per_class"].items())
    )
    return result


def _cli(config_file: str, encoder: str, output_dir: str, **kwargs) -> None:
    probe_command(config_file, encoder, output_dir, **kwargs)


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout)
    fire.Fire(_cli)


if __name__ == "__main__":
    main()
