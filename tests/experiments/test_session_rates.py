"""experiments.gpu_session.session_rates: the fine-tuning throughput of a session, from the cells' TensorBoard wall
times."""

import csv

import pytest
from torch.utils.tensorboard import SummaryWriter

from experiments.gpu_session.session_rates import aggregate, cell_rate, iteration_times, main

T0 = 1_800_000_000.0  # a wall time on a 15-second boundary (1.8e9 = 15 x 1.2e8)


def _write(folder, tag, points):
    writer = SummaryWriter(log_dir=str(folder))
    for step, wall in points:
        writer.add_scalar(tag, 1.0, step, walltime=wall)
    writer.close()


def test_two_cells_at_once_add_their_iterations_per_window():
    # cell a: 25 iterations every 2.5 s (0.1 s each); cell b: 25 every 5 s (0.2 s each)
    a = [(25 * i, T0 + 2.5 * i) for i in range(1, 13)]
    b = [(25 * i, T0 + 5.0 * i) for i in range(1, 7)]
    assert cell_rate(a) == pytest.approx(0.1) and cell_rate(b) == pytest.approx(0.2)
    counts = aggregate([a, b], window=15.0)
    # window [T0, T0 + 15): a's intervals ending at 5, 7.5, 10, 12.5 (4 x 25); b's ending at 10 (1 x 25)
    # [T0 + 15, T0 + 30): a's ending at 15 .. 27.5 (6 x 25), b's at 15, 20, 25 (3 x 25); then both at T0 + 30
    assert counts == {T0: 125, T0 + 15: 225, T0 + 30: 50}
    assert cell_rate([(25, T0)]) is None


def test_main_reads_a_work_folder(tmp_path, capsys):
    experiment = tmp_path / "results" / "gpu-x_acdc"
    _write(
        experiment / "finetune" / "random_L1_d0_s0" / "tensorboard",
        "train_loss",
        [(25 * i, T0 + i) for i in range(1, 31)],
    )
    _write(
        experiment / "finetune" / "gcl_L1_d0_s0" / "tensorboard", "train_loss", [(25 * i, T0 + i) for i in range(1, 31)]
    )
    _write(experiment / "pretrain" / "gcl" / "tensorboard", "loss/total", [(i, T0 + 15 + i) for i in range(1, 10)])
    out = tmp_path / "rates.csv"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    windows = [r for r in rows if r["kind"] == "window"]
    # 2 cells x 25 iterations per second: 50 per second, 0.02 s per iteration in all
    assert float(windows[1]["seconds_per_iteration"]) == pytest.approx(15 / 750)
    assert [int(w["pretrain_steps"]) for w in windows[:2]] == [0, 8]  # the pre-training logs in the second window
    cells = {r["name"]: float(r["seconds_per_iteration"]) for r in rows if r["kind"] == "cell"}
    assert cells == pytest.approx({"gcl_L1_d0_s0": 0.04, "random_L1_d0_s0": 0.04})
    assert "windows without pre-training: median" in capsys.readouterr().out
    assert iteration_times(tmp_path / "absent") == []
    # the same folder as a session returns it: one gzip-compressed tar cut into parts, read without unpacking by hand
    import tarfile

    returned = tmp_path / "returned"
    returned.mkdir()
    with tarfile.open(returned / "run.tgz", "w:gz") as tar:
        tar.add(tmp_path / "results", arcname="results")
    data = (returned / "run.tgz").read_bytes()
    (returned / "run.tgz").unlink()
    (returned / "run.tgz.00").write_bytes(data[: len(data) // 2])
    (returned / "run.tgz.01").write_bytes(data[len(data) // 2 :])
    assert main([str(returned), "--out", str(tmp_path / "again.csv")]) == 0
    assert (tmp_path / "again.csv").read_text() == out.read_text()
