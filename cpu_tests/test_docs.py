"""The docs stand alone: every pointer into the design (``docs/design.md#anchor``) names a
heading of docs/design.md, nothing cites a design document the repository does not hold
(issue 12, item 12), and every link and anchor of the markdown pages resolves (issue 34)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SOURCES = [
    p
    for top in ("reference", "fakes", "faults", "cpu_tests", "gpu_tests", "benchmarks", "docs")
    for p in sorted((ROOT / top).rglob("*"))
    if p.suffix in (".py", ".md") and p.name != "test_docs.py"
] + [ROOT / "README.md"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors() -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", DESIGN.read_text(), re.MULTILINE)}


def headings(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as GitHub makes them (a repeated heading's
    gets ``-1``, ``-2``...); headings inside fenced blocks are not headings."""
    text = re.sub(r"^(```+|~~~+).*?^\1\s*$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    seen: dict[str, int] = {}
    for m in re.finditer(r"^#+ (.+?)\s*$", text, re.MULTILINE):
        slug = _slug(m.group(1))
        seen[slug] = seen.get(slug, -1) + 1
    return {f"{s}-{n}" if n else s for s, count in seen.items() for n in range(count + 1)}


def dead_links(page: Path) -> list[str]:
    """What in ``page`` points at a file or heading that is not there: markdown links
    ``[text](path#anchor)`` (outside inline code) and the bare ``docs/x.md#anchor`` a
    review prints in its finding column (read from the repository root)."""
    text = page.read_text()
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in headings(dest):
            bad.append(f"{target}: no such heading in {dest.name}")
    for path, anchor in re.findall(r"(?<![\w/.])(docs/[\w/.-]+\.md)#([\w-]+)", text):
        dest = ROOT / path
        if not dest.exists() or anchor not in headings(dest):
            bad.append(f"{path}#{anchor}: no such heading")
    return bad


PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_anchor_resolves(page: Path) -> None:
    assert dead_links(page) == []


def test_the_link_check_sees_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n## Twice\n## Twice\n```\n# not a heading\n```\n"
        "[a](#top) [b](#twice-1) [c](#not-a-heading) [d](other.md) [e](page.md#gone) "
        "`[f](inline.md)` [g](https://example.com/x.md#y)\n"
        "docs/reviewer.md#6-reviewing-a-pull-request-kvfault-review docs/reviewer.md#no-such\n"
    )
    assert dead_links(page) == [
        "#not-a-heading: no such heading in page.md",
        "other.md: no such file",
        "page.md#gone: no such heading in page.md",
        "docs/reviewer.md#no-such: no such heading",
    ]


def pointers(text: str) -> list[str]:
    """Anchors named as design.md#a, or as a list: docs/design.md: #a, #b."""
    found = re.findall(r"design\.md#([\w-]+)", text)
    for group in re.findall(r"design\.md:((?:\s*#[\w-]+,?)+)", text):
        found += re.findall(r"#([\w-]+)", group)
    return found


def test_the_design_document_exists_and_has_the_sections_the_code_points_at():
    names = anchors()
    for section in ("keys", "load-bounds", "restores-and-the-transfer-deadline", "faults"):
        assert section in names


def test_every_design_pointer_names_a_heading():
    names = anchors()
    bad = [
        f"{p.relative_to(ROOT)}: #{a}"
        for p in SOURCES
        for a in pointers(p.read_text())
        if a not in names
    ]
    assert bad == []
    assert sum(len(pointers(p.read_text())) for p in SOURCES) > 40  # the pointers are seen


def test_nothing_cites_section_numbers_of_an_outside_design():
    cited = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in SOURCES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"DESIGN\b|§\s*\d|\.\./shared", line)
    ]
    assert cited == []


def test_every_property_has_its_own_letter_in_the_table_and_on_the_properties_page():
    # A property without one shows as "?" in the table's props column and its legend.
    from kvfault.faults.properties import PROPERTIES

    PROPERTY_LETTERS = PROPERTIES.letters
    judged = {*PROPERTIES, "determinism"}
    assert set(PROPERTY_LETTERS) == judged
    assert len(set(PROPERTY_LETTERS.values())) == len(PROPERTY_LETTERS)  # one letter each
    page = (ROOT / "docs" / "properties.md").read_text()
    rows = dict(re.findall(r"^\| ([A-Z]) \| `(\w+)` \|", page, re.MULTILINE))
    assert {prop: letter for letter, prop in rows.items()} == PROPERTY_LETTERS
