"""The contract between the trainer and the handler that combines the per-meta-label gradients: a run without one is
stopped, TaskGradients are applied once, task_gradients batched or one pass per loss."""

import copy

import pytest
import torch
from ignite.engine import Events

from gcl_monai.engines import GCLEvents, GCLPretrainer, TaskGradients
from gcl_monai.networks import GCLNet
from tests.engines.engine_helpers import FEATURES, RandomViews


def test_a_run_without_the_combining_handler_stops_when_it_starts():
    net = GCLNet(features=FEATURES, proj_dim=8)
    before = copy.deepcopy(net.state_dict())
    loader = torch.utils.data.DataLoader(RandomViews(), batch_size=4)
    trainer = GCLPretrainer("cpu", 1, loader, net, torch.optim.SGD(net.parameters(), lr=0.1), meta_labels=[None])
    started = []
    trainer.add_event_handler(Events.ITERATION_STARTED, lambda e: started.append(e.state.iteration))
    with pytest.raises(
        RuntimeError, match=r"no handler combines .* attach a gcl_monai.handlers.GradientCombinerHandler"
    ):
        trainer.run()
    assert started == [] and all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    # a handler that listens but applies nothing is stopped after the event, in the first iteration
    trainer = GCLPretrainer("cpu", 1, loader, net, torch.optim.SGD(net.parameters(), lr=0.1), meta_labels=[None])
    trainer.add_event_handler(GCLEvents.GRADIENTS_COMPUTED, lambda e: None)
    with pytest.raises(RuntimeError, match="no handler applied the per-meta-label gradients: attach a gcl_monai"):
        trainer.run()
    assert trainer.state.iteration == 1


def test_task_gradients_are_applied_once_with_one_gradient_per_parameter():
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    grads = [[torch.ones(2), torch.ones(3)], [2 * torch.ones(2), 2 * torch.ones(3)]]
    gradients = TaskGradients(names=["a", "b"], params=params, grads=grads)
    with pytest.raises(ValueError, match="expected 2 combined gradients"):
        gradients.apply([torch.ones(2)])
    assert not gradients.applied and params[0].grad is None
    gradients.apply([torch.full((2,), 1.5), torch.full((3,), 1.5)], stats={"cos_0_1": torch.tensor(1.0)})
    assert gradients.applied and gradients.grads is None and set(gradients.stats) == {"cos_0_1"}
    assert torch.equal(params[1].grad, torch.full((3,), 1.5))
    with pytest.raises(RuntimeError, match="applied already"):
        gradients.apply([torch.ones(2), torch.ones(3)])


def test_task_gradients_batched_equals_one_pass_per_loss():
    from gcl_monai.engines import task_gradients

    # hand-checkable case: L1 = sum(w^2), L2 = 3 w_0, and an unused parameter v (zero gradient for both)
    w, v = torch.tensor([1.0, -2.0], requires_grad=True), torch.zeros(3, requires_grad=True)
    for batched in (False, True):
        losses = [(w * w).sum(), 3 * w[0]]
        (g1w, g1v), (g2w, g2v) = task_gradients(losses, [w, v], batched=batched)
        assert torch.equal(g1w, torch.tensor([2.0, -4.0])) and torch.equal(g2w, torch.tensor([3.0, 0.0]))
        assert torch.equal(g1v, torch.zeros(3)) and torch.equal(g2v, torch.zeros(3))
