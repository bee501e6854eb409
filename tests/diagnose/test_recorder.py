"""TrajectoryRecorder: one row of scalars per iteration, with the iteration and the batch size, stopping the run after
``max_iterations``."""

import pytest
import torch
from ignite.engine import Engine

from gcl_monai.diagnose import TrajectoryRecorder


class _Trainer(Engine):
    """The parts of a GCLPretrainer the recorder reads: its views' keys, its task names and a dict of scalars."""

    view_keys = ("image", "image_2")
    task_names = ["patient_id", "organ_state"]

    def __init__(self):
        super().__init__(lambda e, batch: {"img/patient_id": torch.tensor(2.0 + e.state.iteration), "change": 0.5})


def test_one_row_per_iteration_until_max_iterations():
    batches = [{"image": torch.zeros(n, 1, 4, 4), "image_2": torch.zeros(n, 1, 4, 4)} for n in (4, 4, 3, 4, 4)]
    trainer = _Trainer()
    recorder = TrajectoryRecorder(max_iterations=3)
    recorder.attach(trainer)
    assert recorder.task_names == ["patient_id", "organ_state"]
    trainer.run(batches, max_epochs=2)
    assert recorder.rows == [
        {"iteration": 1.0, "batch_size": 4.0, "img/patient_id": 3.0, "change": 0.5},
        {"iteration": 2.0, "batch_size": 4.0, "img/patient_id": 4.0, "change": 0.5},
        {"iteration": 3.0, "batch_size": 3.0, "img/patient_id": 5.0, "change": 0.5},
    ]
    assert trainer.state.iteration == 3 and all(type(v) is float for row in recorder.rows for v in row.values())
    whole = TrajectoryRecorder()  # no limit: every iteration of the run
    trainer = _Trainer()
    whole.attach(trainer)
    trainer.run(batches, max_epochs=2)
    assert [row["iteration"] for row in whole.rows] == [float(i) for i in range(1, 11)]
    with pytest.raises(ValueError, match="max_iterations must be at least 1"):
        TrajectoryRecorder(max_iterations=0)
