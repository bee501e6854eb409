import copy
import math
from pathlib import Path

import pytest
import torch
from ignite.engine import Engine, Events
from monai.engines.utils import IterationEvents
from monai.handlers import CheckpointLoader
from monai.networks.nets import BasicUNet

from gcl_monai.engines import GCLEvents, GCLPretrainer, TaskGradients
from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.handlers import (
    AtomicCheckpointSaver,
    CollapseDetector,
    EmbeddingSpread,
    EncoderExporter,
    EpochSeedHandler,
    GradFilterPaceHandler,
    GradientCombinerHandler,
    RepresentationCollapse,
    latest_checkpoint,
)
from gcl_monai.losses import GradFilter, PixelContrastiveLoss
from gcl_monai.networks import GCLNet
from gcl_monai.transforms import BatchContrastiveViews

FEATURES = (4, 4, 8, 8, 16, 4)


class RandomViews(torch.utils.data.Dataset):
    """Slices with two views and three meta labels; the views are drawn from the global torch RNG."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {
            "image": torch.rand(1, 32, 32),
            "image_2": torch.rand(1, 32, 32),
            "patient_id": torch.tensor(i % 3),
            "slice_quantile": torch.tensor(i % 4 + 1),
            "organ_state": torch.tensor(i % 2),
        }


def build(
    meta_labels=("patient_id", "slice_quantile", "organ_state"),
    combiner="mitigator",
    pixel=True,
    ckpt=None,
    device_views=None,
):
    torch.manual_seed(0)
    net = GCLNet(features=FEATURES, proj_dim=8)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loader = torch.utils.data.DataLoader(RandomViews(), batch_size=4, shuffle=True)
    grad_filter = GradFilter() if pixel else None
    comb = GradMitigator(len(meta_labels)) if combiner == "mitigator" else MeanCombiner(len(meta_labels))
    combiner_handler = GradientCombinerHandler(comb)
    trainer = GCLPretrainer(
        device="cpu",
        max_epochs=3,
        train_data_loader=loader,
        network=net,
        optimizer=opt,
        meta_labels=list(meta_labels),
        pixel_loss=PixelContrastiveLoss(temperature=0.1, topk_ratio=0.3) if pixel else None,
        grad_filter=grad_filter,
        device_views=device_views,
    )
    handlers = [combiner_handler, EmbeddingSpread(), EpochSeedHandler(seed=7)]
    if pixel:
        handlers.append(GradFilterPaceHandler(grad_filter))
    for h in handlers:
        h.attach(trainer)
    save_dict = {"network": net, "optimizer": opt, "trainer": trainer, "mitigator": comb}
    if pixel:
        save_dict["grad_filter"] = grad_filter
    return trainer, net, save_dict


def test_iteration_outputs_and_update():
    trainer, net, _ = build()
    before = copy.deepcopy(net.state_dict())
    seen = []
    trainer.add_event_handler(IterationEvents.BACKWARD_COMPLETED, lambda e: seen.append(len(e.state.gradients.grads)))
    trainer.run()
    out = trainer.state.output
    for name in ("patient_id", "slice_quantile", "organ_state"):
        assert torch.isfinite(out[f"img/{name}"]) and torch.isfinite(out[f"pix/{name}"])
    assert seen and all(n == 3 for n in seen)
    assert any(k.startswith("cos") for k in out)
    assert any(not torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert trainer.grad_filter.keep_fraction == pytest.approx(
        1 + torch.log(torch.tensor(5 / 6 + torch.e**-4)).item() / 4, rel=1e-5
    )  # pace of the last of 6 iterations (t = 5)


def test_single_task_sum_equals_plain_backward():
    """SimCLR with the mean combiner gives exactly the gradient of a plain loss.backward()."""
    trainer, net, _ = build(meta_labels=(None,), combiner="mean", pixel=False)
    batch = next(iter(trainer.data_loader))
    ref = copy.deepcopy(net)
    views = torch.cat([batch["image"], batch["image_2"]])
    trainer.image_loss(ref(views)["img"], None).backward()
    captured = {}

    def grab(engine):
        captured.update({n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None})

    trainer.add_event_handler(Events.ITERATION_COMPLETED, grab)
    trainer.optimizer.step = lambda: None  # keep the weights to compare the gradients
    trainer.state.device = torch.device("cpu")
    trainer._iteration(trainer, batch)
    grab(trainer)
    for n, p in ref.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(captured[n], p.grad)


def test_non_finite_input_stops_with_the_meta_labels_named_and_no_update():
    trainer, net, _ = build()
    batch = next(iter(trainer.data_loader))
    batch["image"][0, 0, 3, 3] = float("nan")  # one corrupt pixel poisons every loss of the batch
    before = copy.deepcopy(net.state_dict())
    trainer.state.device = torch.device("cpu")
    trainer.state.iteration = 1
    with pytest.raises(
        RuntimeError,
        match=r"non-finite loss for meta label\(s\) \['patient_id', 'slice_quantile', "
        r"'organ_state'\] at iteration 1",
    ):
        trainer._iteration(trainer, batch)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items() if "running" not in k)


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


def test_missing_meta_label():
    net = GCLNet(features=FEATURES, proj_dim=8)
    loader = torch.utils.data.DataLoader(RandomViews(), batch_size=4)
    trainer = GCLPretrainer("cpu", 1, loader, net, torch.optim.SGD(net.parameters(), lr=0.1), meta_labels=["age"])
    GradientCombinerHandler(MeanCombiner(1)).attach(trainer)
    with pytest.raises(ValueError, match="'age'"):
        trainer.run()


def test_resume_is_bit_for_bit(tmp_path):
    """Interrupt in the middle of epoch 3, resume from the epoch-2 checkpoint: same weights as a full run."""
    full, full_net, _ = build()
    full.run()

    trainer, net, save_dict = build()
    AtomicCheckpointSaver(
        str(tmp_path), save_dict, save_final=False, save_interval=1, epoch_level=True, n_saved=1
    ).attach(trainer)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=5), lambda e: e.terminate())
    trainer.run()
    assert trainer.state.iteration == 5
    ckpt = sorted(tmp_path.glob("*.pt"))[-1]

    resumed, resumed_net, resumed_dict = build()
    CheckpointLoader(str(ckpt), resumed_dict).attach(resumed)
    resumed.run()
    assert resumed.state.iteration == full.state.iteration == 6
    for (k, a), b in zip(full_net.state_dict().items(), resumed_net.state_dict().values()):
        assert torch.equal(a, b), k


def test_device_views_feed_the_network_and_resume_bit_for_bit(tmp_path):
    """With ``device_views`` the network sees the views drawn on the device from the batch's un-augmented slices
    (from torch's generator, which EpochSeedHandler seeds every epoch: resumption stays bit-for-bit)."""
    views, calls = BatchContrastiveViews(spatial_size=32), []

    def recorded(slices):
        calls.append((slices, views(slices)))
        return calls[-1][1]

    trainer, net, _ = build(device_views=recorded)
    batches, inputs = [], []
    trainer.add_event_handler(Events.ITERATION_STARTED, lambda e: batches.append(e.state.batch["image"]))
    net.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
    trainer.run()
    assert len(calls) == len(batches) == len(inputs) == 6
    for (slices, out), batch, network_input in zip(calls, batches, inputs):
        assert torch.equal(slices, batch) and len(out) == 2  # the un-augmented slices, then their two views
        assert torch.equal(network_input, torch.cat(out)) and not torch.equal(out[0], slices)
    assert torch.isfinite(trainer.state.output["loss"])

    full, full_net, _ = build(device_views=BatchContrastiveViews(spatial_size=32))
    full.run()
    trainer, net, save_dict = build(device_views=BatchContrastiveViews(spatial_size=32))
    AtomicCheckpointSaver(
        str(tmp_path), save_dict, save_final=False, save_interval=1, epoch_level=True, n_saved=1
    ).attach(trainer)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=5), lambda e: e.terminate())
    trainer.run()
    resumed, resumed_net, resumed_dict = build(device_views=BatchContrastiveViews(spatial_size=32))
    CheckpointLoader(str(sorted(tmp_path.glob("*.pt"))[-1]), resumed_dict).attach(resumed)
    resumed.run()
    for (k, a), b in zip(full_net.state_dict().items(), resumed_net.state_dict().values()):
        assert torch.equal(a, b), k


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


def test_embedding_spread_hand_computed():
    """Four embeddings, two pairs of equal directions: 4 of the 12 ordered pairs have cosine 1, the rest 0; each
    dimension of the unit vectors is (1, 0, 1, 0) or (0, 1, 0, 1), standard deviation sqrt(1/3)."""
    engine = Engine(lambda e, b: None)
    engine.state.output = {"pred": {"img": torch.tensor([[3.0, 0.0], [0.0, 2.0], [0.5, 0.0], [0.0, 7.0]])}}
    EmbeddingSpread()(engine)
    assert float(engine.state.output["cos/img"]) == pytest.approx(1 / 3)
    assert float(engine.state.output["std/img"]) == pytest.approx(math.sqrt(1 / 3))


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


def test_encoder_export_loads_into_basic_unet(tmp_path):
    trainer, net, _ = build(meta_labels=(None,), combiner="mean", pixel=False)
    EncoderExporter(net, tmp_path / "encoder.pt").attach(trainer)
    trainer.run()
    unet = BasicUNet(spatial_dims=2, out_channels=4, features=FEATURES)
    CheckpointLoader(str(tmp_path / "encoder.pt"), {"model": unet}, strict=False)(trainer)
    for k, v in net.encoder_state_dict().items():
        assert torch.equal(unet.state_dict()[k], v), k


def test_task_gradients_batched_equals_one_pass_per_loss():
    from gcl_monai.engines import task_gradients

    # hand-checkable case: L1 = sum(w^2), L2 = 3 w_0, and an unused parameter v (zero gradient for both)
    w, v = torch.tensor([1.0, -2.0], requires_grad=True), torch.zeros(3, requires_grad=True)
    for batched in (False, True):
        losses = [(w * w).sum(), 3 * w[0]]
        (g1w, g1v), (g2w, g2v) = task_gradients(losses, [w, v], batched=batched)
        assert torch.equal(g1w, torch.tensor([2.0, -4.0])) and torch.equal(g2w, torch.tensor([3.0, 0.0]))
        assert torch.equal(g1v, torch.zeros(3)) and torch.equal(g2v, torch.zeros(3))


@pytest.mark.parametrize("keep_fraction", [1.0, 0.3])
def test_batched_backward_equals_per_meta_label_backward(keep_fraction):
    """The engine's batched backward gives the per-meta-label gradients of the loop (full GCL, GradFilter on/off)."""
    grads = {}
    for batched in (False, True):
        trainer, _, _ = build()
        trainer.batched_backward = batched
        trainer.grad_filter.keep_fraction = keep_fraction
        trainer.add_event_handler(
            IterationEvents.BACKWARD_COMPLETED,
            lambda e, key=batched: grads.setdefault(key, [list(t) for t in e.state.gradients.grads]),
        )
        trainer.state.device = torch.device("cpu")
        torch.manual_seed(3)
        trainer._iteration(trainer, next(iter(trainer.data_loader)))
    assert len(grads[False]) == 3
    for loop_task, batched_task in zip(grads[False], grads[True]):
        for a, b in zip(loop_task, batched_task):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_pixel_warmup_and_embedding_statistics():
    trainer, net, _ = build()
    trainer.pixel_warmup = 4
    records = []

    @trainer.on(Events.ITERATION_COMPLETED)
    def _record(engine):
        records.append({k: float(v) for k, v in engine.state.output.items()})

    outputs = {}
    net.register_forward_hook(lambda m, i, o: outputs.update(img=o["img"].detach().clone()))
    trainer.state.max_epochs = 2
    trainer.run()  # 2 iterations per epoch: t = 1..4
    assert [r["pixel_weight"] for r in records] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    for r in records:
        img = [v for k, v in r.items() if k.startswith("img/")]
        pix = sum(v for k, v in r.items() if k.startswith("pix/"))
        assert len(img) == 3  # "loss" is the mean over the meta labels, not their sum
        assert r["loss"] == pytest.approx((sum(img) + r["pixel_weight"] * pix) / len(img), rel=1e-5)
    # cos/img: mean off-diagonal cosine of the last batch's image embeddings
    unit = torch.nn.functional.normalize(outputs["img"], dim=1)
    cos = unit @ unit.T
    off_diagonal = cos[~torch.eye(len(unit), dtype=torch.bool)]
    assert records[-1]["cos/img"] == pytest.approx(float(off_diagonal.mean()), abs=1e-5)
    with pytest.raises(ValueError, match="pixel_warmup"):
        GCLPretrainer(device="cpu", max_epochs=1, train_data_loader=[], network=net, optimizer=None, pixel_warmup=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batched_backward_equals_per_meta_label_backward_on_cuda():
    from gcl_monai.engines import task_gradients
    from gcl_monai.losses import LastLayerJacobian, MetaContrastiveLoss

    torch.manual_seed(0)
    net = GCLNet(features=FEATURES, proj_dim=8).cuda().eval()  # eval: the two forward passes are identical
    x = torch.rand(8, 1, 32, 32, device="cuda")
    labels = [torch.tensor([0, 1, 0, 1], device="cuda"), None, torch.tensor([2, 2, 3, 3], device="cuda")]

    def losses():
        out = net(x)
        jac = LastLayerJacobian.from_output(net, out)
        pixel = PixelContrastiveLoss(topk_ratio=0.3).forward_multi(
            out["pix"], out["img_map"], labels, GradFilter(0.3), jac
        )
        return [MetaContrastiveLoss(0.1)(out["img"], y) + p for y, p in zip(labels, pixel)]

    params = list(net.parameters())
    loop = task_gradients(losses(), params)
    batched = task_gradients(losses(), params, batched=True)
    for loop_task, batched_task in zip(loop, batched):
        for a, b in zip(loop_task, batched_task):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
