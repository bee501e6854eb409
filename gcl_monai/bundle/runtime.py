"""Where a bundle run computes: its device, the memory layout of its network's weights, its rank among the processes
of a distributed run, and how many loader workers it starts."""

from __future__ import annotations

import os

import torch

__all__ = ["default_device", "default_num_workers", "memory_format", "process_rank"]


def default_device(index: int | str = 0) -> torch.device:
    """``cuda:<index>`` when CUDA is available, else the CPU (``index``: the process's ``LOCAL_RANK`` under
    ``torchrun``, as a string or an integer)."""
    return torch.device(f"cuda:{int(index)}") if torch.cuda.is_available() else torch.device("cpu")


def memory_format(channels_last: bool) -> torch.memory_format:
    """The layout ``Module.to`` gives the network's convolution weights: ``torch.channels_last`` for the bundles'
    ``channels_last`` switch (oneDNN's NHWC kernels: the same float32 arithmetic in another order, faster on CPUs
    with AVX-512; docs/results/speed.md), else ``torch.preserve_format`` (the default, contiguous NCHW)."""
    return torch.channels_last if channels_last else torch.preserve_format


def default_num_workers(max_workers: int = 8) -> int:
    """
    Loader worker processes of one training process: on a CUDA machine the CPU cores shared among the node's
    processes (``LOCAL_WORLD_SIZE`` under ``torchrun``), at most ``max_workers``; on a CPU-only machine 0, so that
    the cores compute the network instead of preparing batches.
    """
    if not torch.cuda.is_available():
        return 0
    return min(max_workers, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def process_rank() -> int:
    """The rank of this process in the initialised ``torch.distributed`` process group, 0 without one."""
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
