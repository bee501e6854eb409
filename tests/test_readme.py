"""README.md within its limits (issue 35, item 5), and its two quick-start commands the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 150
MAX_PARAGRAPH_WORDS = 120


def _paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a Markdown text: blank-line-separated blocks outside code fences, tables and headings."""
    prose, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            prose.append("")
        elif fenced or line.startswith(("|", "#")):
            prose.append("")
        else:
            prose.append(line)
    return [block for block in "\n".join(prose).split("\n\n") if block.strip()]


def test_paragraphs_are_split_outside_code_and_tables():
    text = "one two\nthree\n\n```bash\nno words here count\n```\n| a | b |\n\n# Title\nfour five\n"
    assert [len(p.split()) for p in _paragraphs(text)] == [3, 2]


def test_readme_fits_its_limits():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= MAX_LINES
    longest = max(_paragraphs(text), key=lambda p: len(p.split()))
    assert len(longest.split()) <= MAX_PARAGRAPH_WORDS, longest[:200]


def test_ci_runs_the_readmes_quick_start_commands_as_written():
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    demo, tests = blocks[0].strip(), blocks[1].strip()
    assert "monai.bundle run" in demo and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    assert demo in ci and tests in ci
