"""Every relative link in the user docs leads to a file and heading that exist.

The docs were reorganised into guides that link into the references; a moved file or a renamed
heading would leave a newcomer at a dead end, so each link is followed the way a Markdown viewer
(GitHub's slugs) follows it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*)$")
FENCE = re.compile(r"^\s*```")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            ROOT / "ci" / "bench" / "RESULTS.md"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.add(slug(match.group(1)))
    return found


def relative_links(path: Path) -> list[tuple[str, str]]:
    links = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("<"):
            continue  # a URL, or a placeholder
        file_part, _, anchor = target.partition("#")
        links.append((file_part, anchor))
    return links


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for file_part, anchor in relative_links(doc):
        target = (doc.parent / file_part).resolve() if file_part else doc
        if not target.exists():
            broken.append(f"{file_part}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{file_part}#{anchor}: no such heading")
    assert broken == [], f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_guides_are_listed_in_order_in_the_docs_index() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    guides = re.findall(r"\]\((guides/[^)]+)\)", index)
    assert guides == ["guides/first-run.md", "guides/your-cluster.md",
                      "guides/after-a-fabric-change.md", "guides/reading-results.md"]


def test_user_docs_hold_no_development_step_figures() -> None:
    """Figures of past development steps belong in ci/bench/RESULTS.md, not in the guides."""
    steps = re.compile(r"\bsessions? \d+\b|\bsession-\d+\b", re.IGNORECASE)
    docs = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in docs
             for n, line in enumerate(p.read_text().splitlines(), 1) if steps.search(line)]
    assert found == []
