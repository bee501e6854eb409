"""GradFilterPaceHandler: GradFilter's keep fraction follows the pace g(t) (Eq. 9) of the engine's iteration counter,
also across a resumed run."""

import pytest
from ignite.engine import Engine, Events

from gcl_monai.handlers import GradFilterPaceHandler
from gcl_monai.losses import GradFilter, pace


def _fractions(engine: Engine, grad_filter: GradFilter) -> list[float]:
    seen: list[float] = []
    engine.add_event_handler(Events.ITERATION_COMPLETED, lambda e: seen.append(grad_filter.keep_fraction))
    return seen


def test_the_keep_fraction_follows_the_pace_over_the_engines_iterations():
    grad_filter = GradFilter()
    engine = Engine(lambda engine, batch: None)
    GradFilterPaceHandler(grad_filter).attach(engine)  # T = max_epochs x epoch_length = 8
    seen = _fractions(engine, grad_filter)
    engine.run(range(4), max_epochs=2)
    assert seen == pytest.approx([pace(t, 8) for t in range(8)])
    assert seen[0] == 0.0 and seen == sorted(seen) and engine.state.pace == seen[-1]


def test_a_resumed_run_goes_on_with_the_same_schedule():
    grad_filter = GradFilter()
    engine = Engine(lambda engine, batch: None)
    GradFilterPaceHandler(grad_filter, total_iterations=20).attach(engine)
    seen = _fractions(engine, grad_filter)
    engine.load_state_dict({"iteration": 12, "epoch_length": 4, "max_epochs": 5})  # resumed after epoch 3
    engine.run(range(4))
    assert seen == pytest.approx([pace(t, 20) for t in range(12, 20)])
