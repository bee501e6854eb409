"""Every command that README.md and docs/ show (``python -m experiments...``, ``python -m benchmarks...``) still
exists under its name: its ``--help`` runs from the checkout and exits 0."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
#: ``python -m MODULE [SUBCOMMAND]``: a subcommand is a lower-case word right after the module
COMMAND = re.compile(r"python3? -m ((?:experiments|benchmarks)(?:\.[\w.]*\w)?)(?:[ \t]+([a-z][a-z-]*)(?=[\s`]|$))?")


def documented_commands(texts: list[str]) -> list[tuple[str, ...]]:
    """The distinct ``(module,)`` or ``(module, subcommand)`` of the commands in ``texts``."""
    found = {tuple(filter(None, m.groups())) for text in texts for m in COMMAND.finditer(text)}
    return sorted(found)


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMANDS = documented_commands([p.read_text() for p in DOCS])


def test_the_commands_are_read_from_the_docs():
    text = (
        "python -m experiments --preset cpu-mini --data acdc\n"
        "`python -m experiments protocol --stage A`, python3 -m experiments.gpu_session --out $OUT\n"
        "python -m experiments.gpu_session.offline_payload pack DATA out.xz; python -m benchmarks.bench_grad_filter\n"
        "python -m experiments report results/NAME\n"
    )
    assert documented_commands([text]) == [
        ("benchmarks.bench_grad_filter",),
        ("experiments",),
        ("experiments", "protocol"),
        ("experiments", "report"),
        ("experiments.gpu_session",),
        ("experiments.gpu_session.offline_payload", "pack"),
    ]
    assert ("experiments", "protocol") in COMMANDS and ("experiments.gpu_session",) in COMMANDS


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_each_documented_command_answers_help(command):
    result = subprocess.run(
        [sys.executable, "-m", *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout.lower(), result.stdout[:500]
