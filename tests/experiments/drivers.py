"""Running the protocol's shell drivers in tests: ``python`` on the PATH replaced by a stand-in script that logs what
the driver asks of it (to ``$CALLS``) and leaves the files a real run would."""

import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())

# a stand-in that only logs the arguments of every command, one line each
ARGUMENT_LOGGER = f"""#!{sys.executable}
import os, sys
with open(os.environ["CALLS"], "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
"""

# the drivers' switches: a test sets the ones it means, none comes from the shell that runs the tests
DRIVER_SWITCHES = ("RECIPE", "JOBS", "REMAKE_ENCODERS", "SET_ASIDE_STALE", "TEST_ROOT", "PROBE_OUT", "BRING_BACK")


def run_driver(
    tmp_path: Path, stand_in: str, cmd: list[str], **env_vars: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs ``cmd`` from the repository's root with ``stand_in`` (a script's text) as ``python`` and only the
    driver switches given in ``env_vars``; returns the process and the lines the stand-in logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(stand_in)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in DRIVER_SWITCHES}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", CALLS=str(calls), **env_vars)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return proc, calls.read_text().splitlines() if calls.exists() else []


def most_at_once(log: list[str]) -> int:
    """The most runs going at once in a log of ``start ...`` and ``end ...`` lines."""
    going = most = 0
    for line in log:
        going += 1 if line.startswith("start ") else -1
        most = max(most, going)
    return most
