"""DiceSummary: the primary per-volume Dice and the evaluation variants (end-diastole only, pooled 2D), by hand."""

import json

import torch
from ignite.engine import Engine, Events

from gcl_monai.handlers import DiceSummary
from gcl_monai.handlers.dice_summary import overlap_counts, pooled_dice


def _one_hot(labels: torch.Tensor, num_classes: int = 3) -> torch.Tensor:
    return torch.nn.functional.one_hot(labels.long(), num_classes).movedim(-1, 0).float()


def _volumes():
    """Two 1-slice-deep volumes (2 x 4 x 1 pixels), classes 0 (background), 1, 2.

    Volume A (end-diastole): label 1 on 4 pixels, predicted on 2 of them -> class 1 Dice 2*2/(2+4) = 2/3;
    class 2 on 2 pixels, predicted exactly -> 1.0. Volume B (end-systole): class 1 on 2 pixels, predicted on 2 others
    -> 0.0; class 2 on 2 pixels, predicted on 4 pixels covering both -> 2*2/(4+2) = 2/3.
    """
    label_a = torch.tensor([[1, 1, 1, 1], [2, 2, 0, 0]])[..., None]
    pred_a = torch.tensor([[1, 1, 0, 0], [2, 2, 0, 0]])[..., None]
    label_b = torch.tensor([[1, 1, 0, 0], [2, 2, 0, 0]])[..., None]
    pred_b = torch.tensor([[0, 0, 1, 1], [2, 2, 2, 2]])[..., None]
    return [(pred_a, label_a, 0, "a.nii"), (pred_b, label_b, 1, "b.nii")]


def test_overlap_counts_and_pooled_dice_by_hand():
    (pa, la, _, _), (pb, lb, _, _) = _volumes()
    ca, cb = overlap_counts(_one_hot(pa), _one_hot(la))[0], overlap_counts(_one_hot(pb), _one_hot(lb))[0]
    assert ca.tolist() == [[2, 2], [2, 2], [4, 2]]  # rows: TP, |P|, |G|; columns: classes 1, 2
    assert cb.tolist() == [[0, 2], [2, 4], [2, 2]]
    # pooled: class 1 2*2/(4+6) = 0.4, class 2 2*4/(6+4) = 0.8 -> 0.6 (the per-volume mean would be 0.583)
    assert abs(pooled_dice(ca + cb) - 0.6) < 1e-6
    assert pooled_dice(torch.zeros(3, 2)) is None


def test_summary_gives_primary_end_diastole_and_pooled_dice(tmp_path):
    volumes = _volumes()
    per_class = torch.tensor([[2 / 3, 1.0], [0.0, 2 / 3]])  # what MeanDice's details hold for these volumes

    def step(engine, i):
        pred, label, state, name = volumes[i]
        image = type("Image", (), {"meta": {"filename_or_obj": name}})()
        engine.state.batch = [{"image": image, "organ_state": torch.tensor(state)}]
        return [{"pred": _one_hot(pred), "label": _one_hot(label)}]

    engine = Engine(step)
    # MeanDice(save_details=True) stores its details at the end of the epoch, before the summary reads them
    engine.add_event_handler(
        Events.EPOCH_COMPLETED, lambda e: setattr(e.state, "metric_details", {"test_dice": per_class})
    )
    DiceSummary("test_dice", ["one", "two"], tmp_path / "dice.json").attach(engine)
    engine.run(range(2), max_epochs=1)
    written = json.loads((tmp_path / "dice.json").read_text())
    assert abs(written["dice"] - (5 / 6 + 1 / 3) / 2) < 1e-6  # mean over volumes of the mean over classes
    assert abs(written["dice_ed"] - 5 / 6) < 1e-6 and written["num_volumes_ed"] == 1
    assert abs(written["dice_pooled_2d"] - 0.6) < 1e-6
    assert [v["organ_state"] for v in written["per_volume"]] == [0, 1]
    assert [v["file"] for v in written["per_volume"]] == ["a.nii", "b.nii"]
