"""The work queue that a round's streams share (benchmarks/queue.sh): every job runs once across two concurrent
streams, a finished job is not run again, and a dead stream's claim is taken over."""

import subprocess
from pathlib import Path

QUEUE = Path(__file__).resolve().parents[2] / "benchmarks" / "queue.sh"


def _stream(out: Path, name: str, count: int) -> subprocess.Popen:
    job = f'job() {{ echo "$1 {name}" >> "$OUT/ran"; sleep 0.2; }}'
    script = f'OUT="{out}"; source "{QUEUE}"; {job}; run_queue {name} {count}'
    return subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL)


def _claim(out: Path, index: int) -> int:
    script = f'OUT="{out}"; source "{QUEUE}"; claim_job {index}'
    return subprocess.run(["bash", "-c", script]).returncode


def _dead_pid() -> int:
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


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
    (claim / "pid").write_text(f"{_dead_pid()}\n")  # a stream that stopped while running job 0
    assert _stream(tmp_path, "A", 2).wait() == 0
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1", "A", "A"]
    assert (claim / "done").is_file()


def test_a_finished_job_whose_stream_has_ended_is_not_claimed_again(tmp_path):
    # the race of two streams at the last job: one finishes it and exits between the other's `done` check and its
    # claim; the claim's owner is dead, but its job is done
    claim = tmp_path / "runs" / "claims" / "0"
    claim.mkdir(parents=True)
    (claim / "pid").write_text(f"{_dead_pid()}\n")
    (claim / "done").touch()
    assert _claim(tmp_path, 0) == 1
    assert (claim / "done").is_file()


def test_a_claim_holds_its_process_id_and_a_live_claim_is_refused(tmp_path):
    assert _claim(tmp_path, 3) == 0
    claims = tmp_path / "runs" / "claims"
    assert sorted(p.name for p in claims.iterdir()) == ["3"]  # no temporary folder left beside it
    live = subprocess.Popen(["sleep", "30"])
    try:
        (claims / "3" / "pid").write_text(f"{live.pid}\n")
        assert _claim(tmp_path, 3) == 1
        assert (claims / "3" / "pid").read_text() == f"{live.pid}\n"
    finally:
        live.kill()
        live.wait()


def test_a_rounds_scoring_runs_after_each_job_before_it_is_done(tmp_path):
    # score_job fails once on job 1 (a session stopped mid-scoring): job 1 is not done, and the next call trains
    # (the driver would skip the finished run) and scores it again, before `done`
    job = 'job() { echo "job $1" >> "$OUT/ran"; }'
    score = (
        'score_job() { echo "score $1 $(ls "$OUT/runs/claims/$1")" >> "$OUT/ran"; '
        'if [ "$1" = 1 ] && [ ! -f "$OUT/failed" ]; then touch "$OUT/failed"; return 1; fi; }'
    )
    script = f'set -e; OUT="{tmp_path}"; source "{QUEUE}"; {job}; {score}; run_queue A 3'
    assert subprocess.run(["bash", "-c", script]).returncode != 0
    assert not (tmp_path / "runs/claims/1/done").exists() and not (tmp_path / "runs/claims/2").exists()
    assert subprocess.run(["bash", "-c", script]).returncode == 0
    assert (tmp_path / "ran").read_text().splitlines() == [
        "job 0", "score 0 pid", "job 1", "score 1 pid", "job 1", "score 1 pid", "job 2", "score 2 pid"
    ]  # fmt: skip
    assert all((tmp_path / f"runs/claims/{i}/done").is_file() for i in range(3))
