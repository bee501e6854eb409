"""docs/results/README.md is the index of what was measured: every folder of docs/results is named there as a link,
and every link of it reaches a file or folder of the repository."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
INDEX = RESULTS / "README.md"


def _links(text: str) -> list[str]:
    """The relative targets of the Markdown links of ``text`` (anchors and web addresses left out)."""
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text)]
    return [t for t in targets if t and not re.match(r"^[a-z]+://", t)]


def test_links_are_read_from_markdown():
    text = "see [a/](a/README.md), [b](../b.md#part), [web](https://x.org/y) and [c/](c/)"
    assert _links(text) == ["a/README.md", "../b.md", "c/"]


def test_every_results_folder_is_linked_from_the_index():
    linked = {Path(t).parts[0] for t in _links(INDEX.read_text()) if not t.startswith("..")}
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    assert folders - linked == set(), "folders of docs/results that its README.md does not link"


def test_every_link_of_the_index_exists():
    missing = [t for t in _links(INDEX.read_text()) if not (RESULTS / t).exists()]
    assert missing == []
