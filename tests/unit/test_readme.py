"""The README stays true: every setting is in its configuration table, and every link
between the project's documents finds its file and heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from session_ledger.api.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_documented() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [
        f"LEDGER_{n.upper()}" for n in Settings.model_fields if f"`LEDGER_{n.upper()}`" not in text
    ]
    assert not missing, f"README's configuration table lacks {missing}"


def test_the_two_commands_are_shown() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make serve" in text and "make test" in text


ROOT = README.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(h) for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


@pytest.mark.parametrize(
    "doc", [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
    ids=lambda p: str(p.relative_to(ROOT)),
)  # fmt: skip
def test_relative_links_resolve(doc: Path) -> None:
    """Every link from one of the project's documents to another file, or to a heading,
    finds it: moving a section cannot leave a link to nowhere."""
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{doc.name} has broken links: {broken}"
