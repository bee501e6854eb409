"""SemiSupervisedTrainer: the EMA teacher, each switch, the unlabelled loader, bad switches."""

import math

import pytest
import torch
from ignite.engine import Events
from monai.data import DataLoader, Dataset
from torch import nn

from gcl_monai.engines import SemiSupervisedTrainer


def _trainer(semi_supervised, unlabeled, num_labeled=4, max_epochs=1, **kwargs):
    torch.manual_seed(0)
    net = nn.Conv2d(1, 2, 3, padding=1)
    labeled = [
        {"image": torch.rand(1, 8, 8), "label": torch.randint(0, 2, (1, 8, 8)).float()} for _ in range(num_labeled)
    ]

    def loss(pred, label):
        return nn.functional.cross_entropy(pred, label[:, 0].long())

    trainer = SemiSupervisedTrainer(
        device=torch.device("cpu"),
        max_epochs=max_epochs,
        train_data_loader=DataLoader(Dataset(labeled), batch_size=2),
        network=net,
        optimizer=torch.optim.SGD(net.parameters(), lr=0.5),
        loss_function=loss,
        semi_supervised=semi_supervised,
        unlabeled_data_loader=DataLoader(Dataset(unlabeled), batch_size=2),
        **kwargs,
    )
    return trainer, net


def test_mean_teacher_trainer_updates_the_teacher_by_ema():
    unlabeled = [{"image": torch.rand(1, 8, 8)} for _ in range(3)]
    trainer, net = _trainer("mean_teacher", unlabeled, num_labeled=2, ema_momentum=0.25, consistency_weight=1.0)
    with torch.no_grad():
        net.weight[0].fill_(0.3)  # an initialisation made after the trainer was built, as CheckpointLoader does
        net.weight[1].fill_(-0.3)
    theta0 = [p.detach().clone() for p in net.parameters()]
    students = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=1), lambda: students.append([p.detach().clone() for p in net.parameters()])
    )
    trainer.run()
    assert trainer.state.iteration == 1
    theta1 = students[0]
    for t, s0, s1 in zip(trainer.teacher.parameters(), theta0, theta1):
        torch.testing.assert_close(t, 0.75 * s0 + 0.25 * s1)
    out = trainer.state.output[0]  # decollated: one dictionary per labelled slice
    assert out["consistency_loss"] > 0
    assert float(out["loss"]) == pytest.approx(float(out["supervised_loss"]) + float(out["consistency_loss"]))


@pytest.mark.parametrize("method", ["mean_teacher", "mixup", "vat"])
def test_trainer_runs_each_switch_and_cycles_the_unlabelled_loader(method):
    unlabeled = [{"image": torch.rand(1, 8, 8)} for _ in range(3)]  # 2 batches for 4 iterations: restarted
    trainer, _ = _trainer(method, unlabeled, max_epochs=2, rampup_iterations=4)
    trainer.run()
    assert trainer.state.iteration == 4
    assert math.isfinite(float(trainer.state.output[0]["consistency_loss"]))


def test_trainer_without_switch_is_supervised_and_bad_switches_fail():
    trainer, _ = _trainer(None, [])
    trainer.run()
    assert "consistency_loss" not in trainer.state.output[0]
    with pytest.raises(ValueError, match="needs unlabelled slices"):
        _trainer("vat", [])
    with pytest.raises(ValueError, match="semi_supervised must be"):
        _trainer("fixmatch", [{"image": torch.rand(1, 8, 8)}])
