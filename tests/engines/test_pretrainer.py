import copy

import pytest
import torch
from ignite.engine import Events
from monai.engines.utils import IterationEvents
from monai.handlers import CheckpointLoader

from gcl_monai.engines import GCLPretrainer
from gcl_monai.gradients import MeanCombiner
from gcl_monai.handlers import AtomicCheckpointSaver, GradientCombinerHandler
from gcl_monai.losses import GradFilter, PixelContrastiveLoss
from gcl_monai.networks import GCLNet
from gcl_monai.transforms import BatchContrastiveViews
from tests.engines.engine_helpers import FEATURES, RandomViews, build


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
