"""The speed benchmark's peak memory per variant is the child process's own, not its parent's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc/self/status (VmHWM)")
def test_child_peak_does_not_include_the_parents_memory():
    grown = torch.ones(384, 1024, 1024)  # 1.5 GiB resident in this (the parent) process
    code = "from benchmarks.bench_pretrain_iteration import own_peak_rss_mb; print(own_peak_rss_mb())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    child_peak = float(out.stdout.strip().splitlines()[-1])
    parent_mb = grown.numel() * 4 >> 20
    assert 0 < child_peak < 1024, f"the child reports {child_peak:.0f} MB, the parent holds {parent_mb} MB"
