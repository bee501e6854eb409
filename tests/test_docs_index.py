"""The documentation's links hold: docs/results/README.md, the index of what was measured, links every folder of
docs/results, and every relative link of a Markdown page (README.md, docs/, bundles/) reaches a file or folder of the
repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
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


def test_every_relative_link_of_the_documentation_exists():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "bundles").rglob("*.md")]
    missing = [
        f"{page.relative_to(ROOT)}: {t}"
        for page in pages
        for t in _links(page.read_text())
        if not (page.parent / t).exists()
    ]
    assert len(pages) > 50 and missing == []
