"""CollapseDetector: it needs the embedding spread, and acts after ``patience`` consecutive collapsed iterations."""

import math

import pytest
import torch
from ignite.engine import Engine

from gcl_monai.handlers import CollapseDetector, RepresentationCollapse


def test_collapse_detector_needs_the_embedding_spread():
    engine, data = _watched([{"img/patient_id": 1.5}])
    with pytest.raises(KeyError, match="EmbeddingSpread"):
        engine.run(data)


def _watched(outputs, batch_size=4, **detector_args):
    """An engine whose iterations output ``outputs`` (one dict each) for batches of ``batch_size`` images."""
    engine = Engine(lambda e, batch: outputs[e.state.iteration - 1])
    detector = CollapseDetector(**detector_args)
    detector.attach(engine)
    return engine, [{"image": torch.zeros(batch_size, 1, 8, 8)}] * len(outputs)


def test_collapse_detector_acts_after_patience_consecutive_iterations():
    chance = math.log(2 * 4 - 1)
    healthy = {"std/img": 0.05, "img/patient_id": 1.5, "img/slice_quantile": 1.2}
    flat = {"std/img": 1e-5, "img/patient_id": 1.5, "img/slice_quantile": 1.2}
    at_chance = {"std/img": 0.05, "img/patient_id": chance + 5e-4, "img/slice_quantile": chance - 5e-4}
    one_at_chance = {**at_chance, "img/slice_quantile": 1.2}
    # a healthy iteration resets the count: 2 + 1 healthy + 3 collapsed -> raises at iteration 6, not before
    engine, data = _watched([flat, at_chance, healthy, at_chance, flat, flat, healthy], patience=3)
    with pytest.raises(RepresentationCollapse, match="iteration 6"):
        engine.run(data)
    assert engine.state.collapsed and engine.state.iteration == 6
    # one meta label at chance is not a collapse
    engine, data = _watched([one_at_chance] * 5, patience=3)
    engine.run(data)
    assert not engine.state.collapsed and engine.state.iteration == 5
    engine, data = _watched([flat] * 5, patience=2, action="terminate")
    engine.run(data)
    assert engine.state.collapsed and engine.state.iteration == 2
    with pytest.raises(ValueError, match="action"):
        CollapseDetector(action="warn")
