"""Atomic checkpoints: complete whenever they exist, the best model replaced never removed first, the latest readable
checkpoint found."""

from pathlib import Path

import pytest
import torch
from ignite.engine import Engine, Events

from gcl_monai.handlers import AtomicCheckpointSaver, latest_checkpoint, remove_checkpoints
from tests.engines.engine_helpers import build


def test_atomic_checkpoints_are_complete_whenever_they_exist(tmp_path, monkeypatch):
    """
    While a checkpoint is being written, no file under a checkpoint name is incomplete and (n_saved=2) the
    previous checkpoint is still there to resume from; this is what a run killed mid-write relies on.
    """
    trainer, _, save_dict = build(meta_labels=(None,), combiner="mean", pixel=False)
    AtomicCheckpointSaver(
        str(tmp_path), save_dict, save_final=False, save_interval=1, epoch_level=True, n_saved=2
    ).attach(trainer)
    save, seen = torch.save, []

    def spying_save(obj, target, *args, **kwargs):
        seen.append((Path(getattr(target, "name", target)).name, latest_checkpoint(tmp_path)))
        save(obj, target, *args, **kwargs)

    monkeypatch.setattr(torch, "save", spying_save)
    trainer.run()
    assert [Path(latest).name if latest else None for _, latest in seen] == [
        None,
        "checkpoint_epoch=1.pt",
        "checkpoint_epoch=2.pt",
    ]
    assert not any(target.startswith("checkpoint") for target, _ in seen), seen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_epoch=2.pt", "checkpoint_epoch=3.pt"]


def test_best_model_file_is_replaced_never_removed_first(tmp_path, monkeypatch):
    """A fixed key-metric file name (the fine-tuning's ``model.pt``) always holds the last complete best model."""
    metric = iter([0.2, 0.5, 0.4, 0.9])
    engine = Engine(lambda e, batch: None)
    engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: e.state.metrics.update(dice=next(metric)))
    net = torch.nn.Linear(2, 2)
    AtomicCheckpointSaver(
        str(tmp_path), {"model": net}, save_key_metric=True, key_metric_name="dice", key_metric_filename="model.pt"
    ).attach(engine)
    save, seen = torch.save, []

    def spying_save(obj, target, *args, **kwargs):
        best = tmp_path / "model.pt"
        seen.append((Path(target.name).name, torch.load(best)["bias"].tolist() if best.exists() else None))
        save(obj, target, *args, **kwargs)

    monkeypatch.setattr(torch, "save", spying_save)
    biases = []
    engine.add_event_handler(Events.EPOCH_STARTED, lambda e: biases.append(net.bias.data.add_(1).tolist()))
    engine.run([0], max_epochs=4)
    # written at epochs 1, 2 and 4 (better metric), each time to a temporary file while the last best is intact
    assert [best for _, best in seen] == [None, biases[0], biases[1]]
    assert not any(name == "model.pt" for name, _ in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    assert torch.load(tmp_path / "model.pt")["bias"].tolist() == biases[3]


def test_latest_checkpoint_skips_truncated_files(tmp_path, caplog):
    assert latest_checkpoint(tmp_path / "missing") is None
    torch.save({"epoch": 1}, tmp_path / "checkpoint_epoch=1.pt")
    torch.save({"epoch": 10}, tmp_path / "checkpoint_epoch=10.pt")
    full = (tmp_path / "checkpoint_epoch=10.pt").read_bytes()
    (tmp_path / "checkpoint_epoch=12.pt").write_bytes(full[: len(full) // 2])
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_epoch=10.pt")  # by number, not by name
    assert "checkpoint_epoch=12.pt" in caplog.text
    (tmp_path / "checkpoint_epoch=10.pt").write_bytes(b"")
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_epoch=1.pt")
    torch.save({}, tmp_path / "checkpoint_final_iteration=5.pt")
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoint_final_iteration=5.pt")


def test_saver_state_keeps_the_best_model_across_a_resumption(tmp_path):
    """The key-metric tracking list saved by ``state_dict`` and loaded into a new saver (a resumed run): a later
    worse score does not replace the kept model, a better one does."""
    net = torch.nn.Linear(2, 2)

    def run(scores, tag, state=None):
        metric = iter(scores)
        engine = Engine(lambda e, batch: None)
        engine.add_event_handler(Events.EPOCH_COMPLETED, lambda e: e.state.metrics.update(dice=next(metric)))
        saver = AtomicCheckpointSaver(
            str(tmp_path), {"model": net}, save_key_metric=True, key_metric_name="dice", key_metric_filename="model.pt"
        )
        if state is not None:
            saver.load_state_dict(state)
        saver.attach(engine)
        engine.add_event_handler(Events.EPOCH_STARTED, lambda e: net.bias.data.fill_(tag * 10 + e.state.epoch))
        engine.run([0], max_epochs=len(scores))
        return saver.state_dict()

    state = run([0.3, 0.7], tag=1)
    assert [priority for priority, _ in state["_saved"]] == [0.7]
    run([0.5], tag=2, state=state)  # worse than the kept 0.7: model.pt stays the first run's epoch 2
    assert torch.load(tmp_path / "model.pt")["bias"].tolist() == [12.0, 12.0]
    assert [priority for priority, _ in run([0.4, 0.9], tag=3, state=state)["_saved"]] == [0.9]
    assert torch.load(tmp_path / "model.pt")["bias"].tolist() == [32.0, 32.0]  # its epoch 2 beat 0.7
    with pytest.raises(ValueError, match="only a saver with save_key_metric=True has a state"):
        AtomicCheckpointSaver(str(tmp_path), {"model": net}, save_interval=1).state_dict()


def test_remove_checkpoints_leaves_other_files(tmp_path):
    for name in ("checkpoint_epoch=3.pt", "checkpoint_epoch=4.pt", "model.pt", "notes.txt"):
        (tmp_path / name).write_text("x")
    removed = remove_checkpoints(tmp_path)
    assert [Path(p).name for p in removed] == ["checkpoint_epoch=3.pt", "checkpoint_epoch=4.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "notes.txt"]
    assert remove_checkpoints(tmp_path / "absent") == []


@pytest.mark.parametrize("adopt, left", [(True, [5, 6]), (False, [3, 4, 5, 6])])
def test_a_resumed_saver_adopts_the_checkpoints_already_there(tmp_path, adopt, left):
    """A run resumed at epoch 4 (n_saved=2): adopting the checkpoints of epochs 3 and 4 keeps the last two in the
    end; without it they stay beside the new ones."""
    net = torch.nn.Linear(2, 2)
    for epoch in (3, 4):
        torch.save({"model": net.state_dict()}, tmp_path / f"checkpoint_epoch={epoch}.pt")
    (tmp_path / "model.pt").write_bytes(b"")  # not an interval checkpoint: never adopted
    engine = Engine(lambda e, batch: None)
    engine.load_state_dict({"epoch": 4, "epoch_length": 1, "max_epochs": 4})
    AtomicCheckpointSaver(
        str(tmp_path), {"model": net, "other": net}, save_interval=1, epoch_level=True, n_saved=2,
        save_final=False, adopt_existing=adopt,
    ).attach(engine)  # fmt: skip
    engine.run([0], max_epochs=6)
    assert sorted(int(p.stem.split("=")[1]) for p in tmp_path.glob("checkpoint_epoch=*.pt")) == left
    assert (tmp_path / "model.pt").exists()
