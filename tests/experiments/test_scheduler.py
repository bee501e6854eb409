"""Running an experiment's cells on several workers: the pre-training before its fine-tuning cells, device slots,
worker processes, and the same order as before with one job."""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from experiments.experiment import Experiment, FinetuneCell, PretrainCell
from experiments.plan import execution_order, plan_cells
from experiments.presets import PRESETS
from experiments.scheduler import on_device, run_cells, worker_threads
from experiments.settings import cell_settings


def _cells(tmp_path, repeats=2):
    preset = PRESETS["cpu-mini"].replace(methods=("random", "simclr"), num_labeled=(1,), repeats=repeats)
    return execution_order(*plan_cells(Experiment("s", "demo", preset, results_dir=tmp_path)))


def _device(cell):
    overrides = cell.overrides if isinstance(cell, PretrainCell) else cell.train_overrides
    return overrides.get("device")


def test_one_job_runs_in_plan_order_in_this_process(tmp_path):
    cells = _cells(tmp_path)
    ran, finished = [], []

    def run(cell):
        ran.append((cell.label, os.getpid(), _device(cell)))
        return "finished", 1.5

    run_cells(cells, lambda i, c: True, lambda i, c, outcome, s: finished.append((i, outcome, s)), run=run)
    assert [label for label, _, _ in ran] == [c.label for c in cells]
    assert {pid for _, pid, _ in ran} == {os.getpid()} and {d for _, _, d in ran} == {None}
    assert finished == [(i, "finished", 1.5) for i in range(len(cells))]
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        run_cells(cells, lambda i, c: True, lambda *a: None, jobs=0, run=run)


def test_fine_tuning_waits_for_its_pretraining_while_other_cells_run(tmp_path):
    cells = _cells(tmp_path)
    assert [c.label for c in cells] == [
        "finetune random_L1_d0_s0",
        "pretrain simclr",
        "finetune simclr_L1_d0_s0",
        "finetune random_L1_d1_s1",
        "finetune simclr_L1_d1_s1",
    ]
    lock, events, running, most = threading.Lock(), [], set(), [0]
    random_started = threading.Event()

    def run(cell):
        with lock:
            events.append(("start", cell.label, _device(cell)))
            running.add(cell.label)
            most[0] = max(most[0], len(running))
        if cell.label == "finetune random_L1_d1_s1":
            random_started.set()
        if isinstance(cell, PretrainCell):  # still running while a later random-init cell starts
            assert random_started.wait(10)
        with lock:
            running.discard(cell.label)
            events.append(("end", cell.label, _device(cell)))
        return "finished", 0.0

    prepared = []
    run_cells(
        cells,
        lambda i, c: prepared.append(c.label) or True,
        lambda *a: None,
        jobs=2,
        devices=["cuda:0", "cuda:1"],
        executor=ThreadPoolExecutor(2),
        run=run,
    )
    order = [(kind, label) for kind, label, _ in events]
    pretrain_end = order.index(("end", "pretrain simclr"))
    assert order.index(("start", "finetune simclr_L1_d0_s0")) > pretrain_end
    assert order.index(("start", "finetune simclr_L1_d1_s1")) > pretrain_end
    assert order.index(("start", "finetune random_L1_d1_s1")) < pretrain_end  # ran beside the pre-training
    assert most[0] == 2 and len(prepared) == len(cells)
    # two slots, one device each: cells running at the same time never share one
    busy: dict[str, str] = {}
    for kind, label, device in events:
        if kind == "start":
            assert device in ("$torch.device('cuda:0')", "$torch.device('cuda:1')") and device not in busy.values()
            busy[label] = device
        else:
            del busy[label]


def test_a_pretraining_not_run_frees_its_cells(tmp_path):
    cells = _cells(tmp_path, repeats=1)
    ran = []

    def run(cell):
        ran.append(cell.label)
        return "finished", 0.0

    # the pre-training taken from elsewhere (prepare says no): its fine-tuning cell is then ready
    run_cells(
        cells,
        lambda i, c: isinstance(c, FinetuneCell),
        lambda *a: None,
        jobs=2,
        executor=ThreadPoolExecutor(2),
        run=run,
    )
    assert sorted(ran) == ["finetune random_L1_d0_s0", "finetune simclr_L1_d0_s0"]
    # a pre-training listed after its fine-tuning cell still runs first
    ran.clear()
    pretrain = next(c for c in cells if isinstance(c, PretrainCell))
    run_cells([c for c in cells if c is not pretrain] + [pretrain], lambda i, c: True, lambda *a: None, run=run)
    assert ran == ["finetune random_L1_d0_s0", "pretrain simclr", "finetune simclr_L1_d0_s0"]


def test_a_device_changes_where_a_cell_runs_not_its_settings(tmp_path):
    for cell in _cells(tmp_path, repeats=1):
        moved = on_device(cell, "cuda:1")
        assert _device(moved) == "$torch.device('cuda:1')" and _device(cell) is None
        assert cell_settings(moved) == cell_settings(cell)
        if isinstance(cell, FinetuneCell):
            assert {o["device"] for o in moved.eval_overrides.values()} == {"$torch.device('cuda:1')"}
            assert moved.pretrain is cell.pretrain and moved.folder == cell.folder
    assert on_device(cell, None) is cell


def _record_run(cell):
    """A cell run in a worker process: writes which process, with how many threads and on which device."""
    cell.folder.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "threads": torch.get_num_threads(), "device": _device(cell)}
    (cell.folder / "run.json").write_text(json.dumps(record))
    return "finished", 0.0


def test_jobs_run_in_spawned_worker_processes(tmp_path):
    cells = _cells(tmp_path, repeats=1)
    finished = []
    run_cells(
        cells,
        lambda i, c: True,
        lambda i, c, outcome, s: finished.append(c.label),
        jobs=2,
        devices=["cpu"],
        run=_record_run,
    )
    records = [json.loads((c.folder / "run.json").read_text()) for c in cells]
    assert sorted(finished) == sorted(c.label for c in cells)
    assert os.getpid() not in {r["pid"] for r in records}
    assert {r["threads"] for r in records} == {worker_threads(2)}
    assert {r["device"] for r in records} == {"$torch.device('cpu')"}


def test_worker_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_threads(4) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert worker_threads(4) == 4 and worker_threads(32) == 1
