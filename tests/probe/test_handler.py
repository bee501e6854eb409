"""The probe handler inside a pre-training bundle run: its history, TensorBoard scalars and best encoder, and no change
to the training."""

import json
import os
import subprocess

import numpy as np
import torch

from experiments.report import read_scalars
from tests.bundles.test_bundles import REPO, _pretrain_cmd
from tests.probe.probe_helpers import PROBE_TINY


def _pretrain(root, **override):
    """The demo's pre-training in a process of its own, on one thread (bit-for-bit reproducible on a CPU)."""
    args = _pretrain_cmd(root, 2, {**PROBE_TINY, **override})
    subprocess.run(args, check=True, cwd=REPO, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return root / "outputs" / "pretrain" / "gcl"


def test_the_probe_handler_in_a_pretraining_run(tmp_path):
    run = _pretrain(tmp_path / "probed", probe_interval=1, probe_keep_best=True)
    history = [json.loads(line) for line in (run / "probe_history.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in history] == [1, 2] and all(0 < h["dice"] < 1 for h in history)
    logged = read_scalars(run / "tensorboard")["probe_dice"][1]
    np.testing.assert_allclose(logged, [h["dice"] for h in history], rtol=1e-6)
    best = torch.load(run / "encoder_best_probe.pt", weights_only=True)
    assert set(best) == set(torch.load(run / "encoder.pt", weights_only=True))
    # the probe draws no random number of the training and changes no weight: the encoder of a run without it
    plain = torch.load(_pretrain(tmp_path / "plain") / "encoder.pt", weights_only=True)
    probed = torch.load(run / "encoder.pt", weights_only=True)
    assert all(torch.equal(plain[k], probed[k]) for k in plain)
