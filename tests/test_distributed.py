"""2 CPU processes (gloo): pre-training (mitigated updates, gathered negatives, bundle run and resume in 1 process) and
semi-supervised fine-tuning under DistributedDataParallel."""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ignite.engine import Engine, Events
from monai.bundle import ConfigParser

from gcl_monai.engines import GCLEvents, GCLPretrainer
from gcl_monai.engines.gradient_contract import all_reduce_task_grads
from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.handlers import (
    AtomicCheckpointSaver,
    BroadcastParameters,
    CollapseDetector,
    EpochLengthAdapter,
    GradientCombinerHandler,
    RepresentationCollapse,
)
from gcl_monai.losses import MetaContrastiveLoss, PixelContrastiveLoss, gather_two_view_batch
from gcl_monai.networks import GCLNet

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
BUNDLES = ["gcl_demo", "gcl_acdc", "gcl_prostate", "gcl_mmwhs", "gcl_dicom"]
WORLD = 2
FEATURES = (4, 4, 8, 8, 16, 4)
META = (None, "patient_id", "slice_quantile")
ITERATIONS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(worker, *args) -> None:
    mp.spawn(worker, args=(_free_port(), *args), nprocs=WORLD, join=True)


@pytest.fixture
def one_thread():
    """The reference computations run on one thread, like the workers, so that they do the same float operations."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _init(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)


def _finish() -> None:
    """Every rank reaches the end before the process group goes: a rank whose peer is still tearing down gloo's
    connections can otherwise abort at exit ("terminate called without an active exception", seen once in CI)."""
    dist.barrier()
    dist.destroy_process_group()


def _batches(rank: int) -> list[dict]:
    """ITERATIONS batches of 4 images of rank ``rank``: two views and two meta labels."""
    g = torch.Generator().manual_seed(100 + rank)
    return [
        {
            "image": torch.rand(4, 1, 32, 32, generator=g),
            "image_2": torch.rand(4, 1, 32, 32, generator=g),
            "patient_id": torch.randint(0, 2, (4,), generator=g),
            "slice_quantile": torch.randint(1, 4, (4,), generator=g),
        }
        for _ in range(ITERATIONS)
    ]


def _network(seed: int) -> GCLNet:
    """A tiny GCLNet with instance norm: a row's output does not depend on the other images of the batch."""
    torch.manual_seed(seed)
    return GCLNet(features=FEATURES, proj_dim=8)


def _views(batch: dict) -> torch.Tensor:
    return torch.cat([batch["image"], batch["image_2"]])


def _labels(batch: dict) -> list:
    return [None if m is None else batch[m] for m in META]


def _grad(loss: torch.Tensor, params: list) -> list[torch.Tensor]:
    """Gradient of ``loss``, zeros for unused parameters (as GCLPretrainer does)."""
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def _mitigated_worker(rank: int, port: int, out_dir: str) -> None:
    _init(rank, port)
    net = _network(seed=rank)  # different on each rank: BroadcastParameters makes them rank 0's
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    trainer = GCLPretrainer("cpu", 1, _batches(rank), net, opt, meta_labels=META)
    mitigator = GradMitigator(len(META))
    handler = GradientCombinerHandler(mitigator)
    handler.attach(trainer)
    BroadcastParameters(net).attach(trainer)
    saved = {"network": net, "mitigator": mitigator}
    AtomicCheckpointSaver(str(Path(out_dir) / f"ckpt{rank}"), saved, save_interval=1).attach(trainer)
    trainer.run()
    torch.save({"params": net.state_dict(), "targets": mitigator.targets}, Path(out_dir) / f"rank{rank}.pt")
    _finish()


def test_mitigated_update_matches_single_process(tmp_path, one_thread):
    """
    2 ranks == 1 process that averages each meta label's gradient over the 2 per-rank batches, mitigates and steps;
    the EMA targets are equal on the ranks, and only rank 0 writes checkpoints.
    """
    _spawn(_mitigated_worker, str(tmp_path))
    net = _network(seed=0)
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    mitigator = GradMitigator(len(META))
    loss_fn = MetaContrastiveLoss(temperature=0.1)
    per_rank = [_batches(r) for r in range(WORLD)]
    for t in range(ITERATIONS):
        grads = []
        for batches in per_rank:
            z = net(_views(batches[t]))["img"]
            grads.append([_grad(loss_fn(z, y), params) for y in _labels(batches[t])])
        averaged = [[sum(g) / WORLD for g in zip(*task)] for task in zip(*grads)]
        opt.zero_grad()
        for p, g in zip(params, mitigator.combine(averaged)):
            p.grad = g
        opt.step()
    assert [len(list(tmp_path.glob(f"ckpt{r}/*.pt"))) for r in range(WORLD)] == [1, 0], "rank 0 saves, alone"
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for result in results:
        for name, value in net.state_dict().items():
            torch.testing.assert_close(result["params"][name], value, atol=1e-5, rtol=1e-5, msg=name)
    assert torch.equal(results[0]["targets"], results[1]["targets"]), "EMA targets differ between ranks"
    torch.testing.assert_close(results[0]["targets"], mitigator.targets, atol=1e-5, rtol=1e-5)


def _gathered_worker(rank: int, port: int, out_dir: str) -> None:
    _init(rank, port)
    net = _network(seed=0)
    trainer = GCLPretrainer(
        "cpu",
        1,
        _batches(rank)[:1],
        net,
        torch.optim.SGD(net.parameters(), lr=0.0),
        meta_labels=META,
        pixel_loss=PixelContrastiveLoss(temperature=0.1, topk_ratio=0.3),
        gather_negatives=True,
    )
    saved = {}

    @trainer.on(GCLEvents.GRADIENTS_COMPUTED)
    def grab(engine):
        saved["grads"] = all_reduce_task_grads(engine.state.gradients.grads)
        engine.state.gradients.apply([None] * len(engine.state.gradients.params))  # lr 0: no update

    trainer.run()
    saved["img"] = [float(trainer.state.output[f"img/{name}"]) for name in trainer.task_names]
    torch.save(saved, Path(out_dir) / f"rank{rank}.pt")
    _finish()


def test_gathered_negatives_match_single_process(tmp_path, one_thread):
    """
    With gathered negatives, every rank's image-wise loss is the loss of the concatenated batch (view-1 rows of all
    ranks, then view-2 rows), and the per-label gradients averaged over ranks are those of that loss plus the mean
    of the per-rank pixel-wise losses.
    """
    _spawn(_gathered_worker, str(tmp_path))
    net = _network(seed=0)
    params = list(net.parameters())
    img_loss, pix_loss = MetaContrastiveLoss(temperature=0.1), PixelContrastiveLoss(temperature=0.1, topk_ratio=0.3)
    batches = [_batches(r)[0] for r in range(WORLD)]
    merged = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    outs = [net(_views(b)) for b in batches]
    z = net(_views(merged))["img"]
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for m, y in enumerate(_labels(merged)):
        loss_img = img_loss(z, y)
        pix = [pix_loss(o["pix"], o["img_map"], None if y is None else b[META[m]]) for o, b in zip(outs, batches)]
        expected = _grad(loss_img + sum(pix) / WORLD, params)
        for result in results:
            assert result["img"][m] == pytest.approx(loss_img.item(), abs=1e-5)
            got = torch.cat([g.flatten() for g in result["grads"][m]])
            want = torch.cat([g.flatten() for g in expected])
            # float32 sums in another order (one batch of 2N rows vs two of N): relative error ~1e-6
            assert float((got - want).norm()) <= 1e-4 * float(want.norm()), META[m]


class _Indexed(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"image": torch.rand(1, 32, 32), "image_2": torch.rand(1, 32, 32), "index": torch.tensor(i)}


def _collapse_worker(rank: int, port: int, out_dir: str) -> None:
    """Runs the collapse cases of :py:func:`test_collapse_decision_is_the_same_on_every_rank` on one rank."""
    _init(rank, port)
    healthy = {"std/img": 0.05, "img/a": 1.0}
    flat = {"std/img": 1e-5, "img/a": 1.0}
    cases = {
        "one rank flat": [flat if rank == 0 else healthy] * 4,
        "both flat from iteration 2": [healthy] + [flat] * 3,
        "gathered, at the global chance": [{"std/img": 0.05, "img/a": math.log(2 * 4 * WORLD - 1)}] * 4,
        "gathered, at the local chance": [{"std/img": 0.05, "img/a": math.log(2 * 4 - 1)}] * 4,
    }
    results = {}
    for name, outputs in cases.items():
        engine = Engine(lambda e, batch, outputs=outputs: outputs[e.state.iteration - 1])
        engine.gather_negatives = name.startswith("gathered")
        CollapseDetector(patience=2).attach(engine)
        try:
            engine.run([{"image": torch.zeros(4, 1, 8, 8)}] * 4)
            results[name] = ("finished", engine.state.iteration)
        except RepresentationCollapse:
            results[name] = ("collapse", engine.state.iteration)
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(results))
    _finish()


def test_collapse_decision_is_the_same_on_every_rank(tmp_path):
    """No rank raises alone (the others would wait in the next collective); B is global with gathered negatives."""
    _spawn(_collapse_worker, str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert ranks[0] == ranks[1]
    assert ranks[0] == {
        "one rank flat": ["finished", 4],
        "both flat from iteration 2": ["collapse", 3],
        "gathered, at the global chance": ["collapse", 2],
        "gathered, at the local chance": ["finished", 4],
    }


def test_distributed_sampler_is_reshuffled_every_epoch():
    """MONAI's Workflow calls DistributedSampler.set_epoch(epoch) at every epoch of GCLPretrainer."""
    sampler = torch.utils.data.DistributedSampler(_Indexed(), num_replicas=WORLD, rank=1, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(_Indexed(), batch_size=2, sampler=sampler)
    net = _network(seed=0)
    trainer = GCLPretrainer("cpu", 2, loader, net, torch.optim.SGD(net.parameters(), lr=0.0), meta_labels=["index"])
    GradientCombinerHandler(MeanCombiner(1)).attach(trainer)
    seen = {1: [], 2: []}
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda e: seen[e.state.epoch].extend(e.state.batch["index"].tolist())
    )
    trainer.run()
    expected = {}
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        expected[epoch] = list(sampler)
    assert seen == expected and seen[1] != seen[2]


def test_single_process_helpers_are_no_ops():
    z, labels = torch.randn(6, 4), [None, torch.tensor([0, 1, 0])]
    gathered, gathered_labels = gather_two_view_batch(z, labels)
    assert gathered is z and gathered_labels == labels
    BroadcastParameters(torch.nn.Linear(2, 2))()  # no process group: nothing to do


def test_epoch_length_adapter_rescales_trainer_and_cosine_schedule():
    def resumed(epoch_length, state, t_max=12, max_epochs=4):
        """A run configured for ``max_epochs`` of ``epoch_length``, resumed from 1 epoch of 3 iterations of 4."""
        engine = Engine(lambda e, b: None)
        engine.state.epoch_length = epoch_length
        param = torch.nn.Parameter(torch.zeros(1))
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            torch.optim.SGD([param], lr=1.0), T_max=max_epochs * epoch_length
        )

        @engine.on(Events.STARTED)
        def load(engine):  # what a CheckpointLoader does at STARTED, before the adapter
            engine.load_state_dict(state)
            scheduler.load_state_dict({**scheduler.state_dict(), "T_max": t_max, "last_epoch": state["iteration"]})

        EpochLengthAdapter(scheduler).attach(engine)
        engine.add_event_handler(Events.STARTED, lambda e: e.terminate())
        engine.run(range(epoch_length), max_epochs=max_epochs)
        return engine, scheduler

    engine, scheduler = resumed(8, {"epoch_length": 3, "iteration": 3, "max_epochs": 4})
    assert (engine.state.epoch, engine.state.iteration, engine.state.epoch_length) == (1, 8, 8)
    assert (scheduler.last_epoch, scheduler.T_max) == (8, 32)
    _, scheduler = resumed(3, {"epoch_length": 3, "iteration": 3, "max_epochs": 4})  # same length: untouched
    assert (scheduler.last_epoch, scheduler.T_max) == (3, 12)
    with pytest.raises(ValueError, match="epoch-end checkpoint"):
        resumed(8, {"epoch_length": 3, "iteration": 4, "max_epochs": 4})
    # a run of 4 epochs resumed as one of 8: the configured cosine from the restored iteration on
    engine, scheduler = resumed(3, {"epoch_length": 3, "iteration": 3, "max_epochs": 4}, max_epochs=8)
    assert (scheduler.last_epoch, scheduler.T_max) == (3, 24)
    lrs = []
    for _ in range(21):
        lrs.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.step()
    assert lrs == pytest.approx([(1 + math.cos(math.pi * t / 24)) / 2 for t in range(3, 24)], abs=1e-12)
    with pytest.raises(TypeError, match="CosineAnnealingLR"):
        EpochLengthAdapter(torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]), 2))


@pytest.mark.parametrize("bundle", BUNDLES)
def test_multi_gpu_overrides(bundle):
    """Same overrides for every dataset; they keep the base initialisation and append BroadcastParameters."""
    configs = REPO / "bundles" / bundle / "configs"
    for kind in ("pretrain", "train"):
        override = json.loads((configs / f"multi_gpu_{kind}.json").read_text())
        demo = REPO / "bundles" / "gcl_demo" / "configs" / f"multi_gpu_{kind}.json"
        assert override == json.loads(demo.read_text())
        base = json.loads((configs / f"{kind}.json").read_text())
        assert all(expr in override["initialize"] for expr in base["initialize"]), "base initialisation missing"
    parser = ConfigParser()
    parser.read_config([str(configs / "pretrain.json"), str(configs / "multi_gpu_pretrain.json")])
    targets = [h["_target_"] for h in parser["train#checkpoint_handlers"]]
    assert targets == [
        "CheckpointLoader",
        "gcl_monai.handlers.EpochLengthAdapter",
        "gcl_monai.handlers.AtomicCheckpointSaver",
        "gcl_monai.handlers.BroadcastParameters",
    ]


def _pretrain_bundle(launcher: list[str], config_file: str, work_dir: Path, epochs: int, **extra: str) -> None:
    tiny = {
        "--work_dir": str(work_dir),
        "--num_patients": "6",
        "--num_pretrain": "3",
        "--num_val": "1",
        "--num_test": "1",
        "--image_size": "[32,32]",
        "--features": "[4,4,8,8,16,4]",
        "--batch_size": "4",
        "--epochs": str(epochs),
        **{f"--{k}": v for k, v in extra.items()},
    }
    cmd = [sys.executable, *launcher, "-m", "monai.bundle", "run", "pretrain", "--config_file", config_file]
    cmd += [x for item in tiny.items() for x in item]
    proc = subprocess.run(
        cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_two_rank_bundle_pretraining_resumes_in_one_process(tmp_path):
    """2 ranks write one checkpoint (rank 0 only); 1 process resumes from it with its own epoch length."""
    configs = "bundles/gcl_demo/configs/"
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}"]
    _pretrain_bundle(torchrun, f"['{configs}pretrain.json','{configs}multi_gpu_pretrain.json']", tmp_path, epochs=1)
    out_dir = tmp_path / "pretrain" / "gcl"
    assert sorted(p.name for p in out_dir.glob("*.pt")) == ["checkpoint_epoch=1.pt", "encoder.pt"]
    first = torch.load(out_dir / "checkpoint_epoch=1.pt", weights_only=False)

    _pretrain_bundle([], f"{configs}pretrain.json", tmp_path, epochs=2)
    second = torch.load(out_dir / "checkpoint_epoch=2.pt", weights_only=False)
    per_rank, full = first["trainer"]["epoch_length"], second["trainer"]["epoch_length"]
    assert full > per_rank
    assert second["trainer"]["iteration"] == 2 * full
    assert second["mitigator"]["step"] == per_rank + full


def test_two_ranks_read_disjoint_halves_of_one_grouped_order(tmp_path):
    """--slices_per_patient under torchrun: multi_gpu_pretrain.json gives each rank a GroupedSampler of its own
    rank. The phantom's 3 pre-training patients have 24, 22 and 16 slices: 5 groups of 10, so each rank reads 2
    (2 batches of 10); a DistributedSampler would give each rank 31 slices (3 batches), one process 5."""
    configs = "bundles/gcl_demo/configs/"
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}"]
    files = f"['{configs}pretrain.json','{configs}multi_gpu_pretrain.json']"
    _pretrain_bundle(torchrun, files, tmp_path, epochs=1, slices_per_patient="10", batch_size="10")
    checkpoint = torch.load(tmp_path / "pretrain" / "gcl" / "checkpoint_epoch=1.pt", weights_only=False)
    assert checkpoint["trainer"]["epoch_length"] == 2


def _semi_supervised_worker(rank: int, port: int, semi_supervised: str, out_dir: str) -> None:
    """Fine-tuning with a consistency loss, the student wrapped in DistributedDataParallel as multi_gpu_train.json
    does; the "pre-trained" weights are loaded on STARTED by a CheckpointLoader, as in the bundle."""
    from monai.data import DataLoader, Dataset
    from monai.handlers import CheckpointLoader
    from monai.losses import DiceCELoss
    from monai.networks.nets import BasicUNet

    from gcl_monai.engines import SemiSupervisedTrainer

    _init(rank, port)
    torch.manual_seed(0)
    net = BasicUNet(spatial_dims=2, in_channels=1, out_channels=3, features=FEATURES, norm="batch")
    pretrained = Path(out_dir) / "pretrained.pt"
    g = torch.Generator().manual_seed(100 + rank)  # different data on each rank
    labelled = [
        {"image": torch.rand(2, 1, 32, 32, generator=g), "label": torch.randint(0, 3, (2, 1, 32, 32), generator=g)}
        for _ in range(2)
    ]
    unlabelled = DataLoader(Dataset([{"image": torch.rand(1, 32, 32, generator=g)} for _ in range(4)]), batch_size=2)
    student = torch.nn.parallel.DistributedDataParallel(net)
    trainer = SemiSupervisedTrainer(
        device=torch.device("cpu"),
        max_epochs=1,
        train_data_loader=labelled,
        network=student,
        optimizer=torch.optim.SGD(student.parameters(), lr=1e-3),
        loss_function=DiceCELoss(to_onehot_y=True, softmax=True),
        train_handlers=[CheckpointLoader(str(pretrained), {"model": student})],
        semi_supervised=semi_supervised,
        unlabeled_data_loader=unlabelled,
        consistency_weight=1.0,
        ema_momentum=0.5,
    )
    trainer.run()
    teacher = None if trainer.teacher is None else dict(trainer.teacher.named_parameters())
    torch.save({"student": dict(net.named_parameters()), "teacher": teacher}, Path(out_dir) / f"rank{rank}.pt")
    _finish()


@pytest.mark.parametrize("semi_supervised", ["mean_teacher", "mixup", "vat"])
def test_semi_supervised_fine_tuning_under_ddp(tmp_path, semi_supervised):
    """Every consistency loss forwards the DDP student again (VAT also differentiates through it): the ranks,
    fed different data, end with the same student (DDP reduced every gradient), and the EMA teacher starts from the
    loaded weights, not from the network's random initialisation."""
    from monai.networks.nets import BasicUNet

    torch.manual_seed(0)
    init = BasicUNet(spatial_dims=2, in_channels=1, out_channels=3, features=FEATURES, norm="batch").state_dict()
    loaded = {k: v + 1.0 if v.is_floating_point() else v for k, v in init.items()}
    torch.save({"model": loaded}, tmp_path / "pretrained.pt")
    _spawn(_semi_supervised_worker, semi_supervised, str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for name, param in ranks[0]["student"].items():
        assert torch.equal(param, ranks[1]["student"][name]), name
    assert any(not torch.equal(p, loaded[n]) for n, p in ranks[0]["student"].items()), "the student was not trained"
    if semi_supervised == "vat":
        assert ranks[0]["teacher"] is None
        return
    for name, param in ranks[0]["teacher"].items():
        assert torch.equal(param, ranks[1]["teacher"][name]), name
        # lr 1e-3 for 2 steps: a teacher started from the loaded weights stays within 0.05 of them; one started
        # from the random initialisation (1.0 away) would keep a quarter of it after 2 EMA steps of momentum 0.5
        assert (param - loaded[name]).abs().max() < 0.05, name
