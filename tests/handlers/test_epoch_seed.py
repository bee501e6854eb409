"""EpochSeedHandler: an epoch's randomness is a function of (seed, epoch), so a resumed run draws what an
uninterrupted one draws."""

import torch
from ignite.engine import Engine
from torch.utils.data import DataLoader

from gcl_monai.handlers import EpochSeedHandler


class _Seeded(torch.utils.data.Dataset):
    """Records the epoch seeds it is given (``set_epoch_seed``, as gcl_monai.data.SliceDataset has)."""

    def __init__(self) -> None:
        self.seeds: list[int | None] = []

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> int:
        return index

    def set_epoch_seed(self, seed: int | None) -> None:
        self.seeds.append(seed)


def _draws(seed: int, resume_at_epoch: int = 0) -> dict[int, list[float]]:
    """Each epoch's draws of torch's generator, in a run of 3 epochs of 3 shuffled batches."""
    draws: dict[int, list[float]] = {}
    engine = Engine(lambda engine, batch: draws.setdefault(engine.state.epoch, []).append(float(torch.rand(1))))
    EpochSeedHandler(seed).attach(engine)
    if resume_at_epoch:
        engine.load_state_dict({"epoch": resume_at_epoch, "epoch_length": 3, "max_epochs": 3})
    engine.data_loader = DataLoader(_Seeded(), shuffle=True)  # as MONAI's workflows hold it
    engine.run(engine.data_loader, max_epochs=3)
    return draws


def test_a_resumed_run_draws_what_an_uninterrupted_one_draws():
    torch.manual_seed(123)
    whole = _draws(seed=7)
    torch.manual_seed(456)  # another state of the generator when the run resumes
    resumed = _draws(seed=7, resume_at_epoch=2)
    assert sorted(resumed) == [3] and resumed[3] == whole[3]
    assert whole[1] != whole[2] != whole[3]  # the seed moves with the epoch
    assert _draws(seed=8)[3] != whole[3]


def test_without_workers_the_dataset_is_seeded_by_the_handler_not_per_worker():
    dataset = _Seeded()
    engine = Engine(lambda engine, batch: None)
    EpochSeedHandler(5).attach(engine)
    engine.data_loader = DataLoader(dataset)
    engine.run(engine.data_loader, max_epochs=2)
    assert dataset.seeds == [None, None]  # set_rnd seeds its transforms in this process, each epoch
