"""The work queue that a round's streams share (benchmarks/queue.sh): every job runs once across two concurrent
streams, a finished job is not run again, and a dead stream's claim is taken over."""

import subprocess
from pathlib import Path

QUEUE = Path(__file__).resolve().parents[2] / "benchmarks" / "queue.sh"


def _stream(out: Path, name: str, count: int) -> subprocess.Popen:
    job = f'job() {{ echo "$1 {name}" >> "$OUT/ran"; sleep 0.2; }}'
    script = f'OUT="{out}"; source "{QUEUE}"; {job}; run_queue {name} {count}'
    return subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL)


def test_two_streams_run_each_job_once_and_skip_finished_ones(tmp_path):
    streams = [_stream(tmp_path, name, 6) for name in ("A", "B")]
    assert [s.wait() for s in streams] == [0, 0]
    ran = [line.split() for line in (tmp_path / "ran").read_text().splitlines()]
    assert sorted(int(index) for index, _ in ran) == list(range(6))
    assert {stream for _, stream in ran} == {"A", "B"}  # shared, not each stream doing all
    assert _stream(tmp_path, "C", 6).wait() == 0
    assert len((tmp_path / "ran").read_text().splitlines()) == 6  # all finished: nothing runs again


def test_a_dead_streams_claim_is_taken_over(tmp_path):
    claim = tmp_path / "runs" / "claims" / "0"
    claim.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (claim / "pid").write_text(f"{dead.pid}\n")  # a stream that stopped while running job 0
    assert _stream(tmp_path, "A", 2).wait() == 0
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1", "A", "A"]
    assert (claim / "done").is_file()
