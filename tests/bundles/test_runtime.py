"""Where a bundle run computes (gcl_monai.bundle.runtime): its device, its loader workers and its rank, on this
machine and with CUDA or a process group stood in for."""

import pytest
import torch

from gcl_monai.bundle import default_device, default_num_workers, process_rank


@pytest.fixture
def cuda_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine")
def test_a_cpu_only_machine_computes_on_the_cpu_without_loader_workers():
    assert default_device() == torch.device("cpu") and default_device("3") == torch.device("cpu")
    assert default_num_workers() == 0 and default_num_workers(max_workers=32) == 0


def test_on_cuda_the_device_is_the_local_rank(cuda_available):
    assert default_device() == torch.device("cuda:0")
    assert default_device("2") == torch.device("cuda:2") and default_device(1) == torch.device("cuda:1")


def test_on_cuda_the_cores_are_shared_among_the_nodes_processes(cuda_available, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_num_workers() == 8  # 16 cores, at most 8
    assert default_num_workers(max_workers=32) == 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_num_workers() == 4  # 16 cores among 4 processes
    assert default_num_workers(max_workers=3) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert default_num_workers() == 0
    monkeypatch.setattr("os.cpu_count", lambda: None)  # unknown: one core
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert default_num_workers() == 1


def test_the_rank_is_the_process_groups(monkeypatch):
    assert not torch.distributed.is_initialized() and process_rank() == 0
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 3)
    assert process_rank() == 3
