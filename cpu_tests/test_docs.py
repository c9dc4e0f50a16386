"""The docs stand alone: every pointer into the design (``docs/design.md#anchor``) names a
heading of docs/design.md, and nothing cites a design document the repository does not
hold (issue 12, item 12)."""

from __future__ import annotations

import re
from pathlib import Path

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
