"""What each atom row does at ATOM's main (``kvfault.faults.atom.at_main``): the
declaration, the page of findings and the default set agree, ``kvfault list --tier
atom`` prints it, and a campaign's verdict that differs from it is named (the campaign
test, ``cpu_tests/atom/test_atom_campaign.py``, turns red on it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from atom_list import listed

from kvfault.faults.atom import at_main, catalog
from kvfault.faults.atom.at_main import FAILING, FINDING, LEAD, LMCACHE_LEAD, disagreement
from kvfault.faults.cli import main
from kvfault.faults.verdicts import Verdict

FINDINGS_MD = Path(__file__).resolve().parents[3] / "docs" / "atom" / "findings.md"


def _sections() -> dict[str, str]:
    """findings.md's ``## `` sections, by heading."""
    parts = re.split(r"^## ", FINDINGS_MD.read_text(), flags=re.M)[1:]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts}


def _named_rows(text: str) -> set[str]:
    return {n for n in re.findall(r"`([a-z0-9_]+)`", text) if n in catalog.ROWS}


def test_every_failing_row_is_a_row_and_says_what_it_is():
    for name, row in FAILING.items():
        assert name in catalog.ROWS, name
        assert row.verdict == Verdict.FAIL and row.prop in catalog.ROWS[name].properties, name
        assert row.kind in (FINDING, LEAD, LMCACHE_LEAD), name
        assert (row.finding is not None) == (row.kind == FINDING), name
    assert at_main.at_main("prefix_reuse") == at_main.AtMain()  # undeclared: PASS


def test_each_findings_rows_in_the_page_are_its_declared_rows_and_back():
    # Each numbered finding of findings.md names its rows (**Rows.**) and the property
    # they FAIL with; the declaration holds exactly those rows as that finding's.
    said: dict[int, tuple[set[str], str]] = {}
    for heading, body in _sections().items():
        number = re.match(r"(\d+)\. (?!Lead:)", heading)
        if number is None:
            continue
        line = next((x for x in body.splitlines() if x.startswith("**Rows.**")), None)
        assert line is not None, f"finding {heading!r} names no rows"
        prop = re.search(r"FAIL `([a-z_]+)` at " + at_main.PINNED, line)
        assert prop is not None, line
        said[int(number.group(1))] = (_named_rows(line), prop.group(1))
    declared: dict[int, tuple[set[str], str]] = {}
    for name, row in FAILING.items():
        if row.kind == FINDING:
            assert row.finding is not None
            rows, _ = declared.setdefault(row.finding, (set(), str(row.prop)))
            rows.add(name)
            assert declared[row.finding][1] == row.prop, name
    assert said == declared


def test_rows_the_page_names_as_leads_or_passing_are_declared_so():
    sections = _sections()
    leads = [body for heading, body in sections.items() if re.match(r"\d+\. Lead:", heading)]
    for name in set().union(*map(_named_rows, leads)):
        assert FAILING[name].kind == LEAD, name
    for name in _named_rows(sections["Rows that pass, and what they show"]):
        assert at_main.at_main(name).verdict == Verdict.PASS, name


def test_every_row_that_fails_at_main_runs_by_default_and_no_class_stands_on_one():
    # The default set's rule (docs/atom/tier.md): every row that FAILs at ATOM's main
    # runs without --full, and the default row that runs a class for the long matrix's
    # rows PASSes there (one that already fails would show no new break of its class).
    assert not set(FAILING) & set(catalog.LONG_MATRIX)
    assert not set(FAILING) & set(catalog.LONG_MATRIX.values())


def test_list_says_what_each_row_does_at_atoms_main(capsys):
    assert main(["list", "--tier", "atom"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = listed(lines, 3, "at ATOM's main")
    assert sorted(said) == sorted(catalog.ROWS)
    assert said["shared_tier_tp_pp"] == "at ATOM's main: FAIL correctness at ffdf3bb5d: finding 6"
    assert said["lost_hit_reply"] == "at ATOM's main: FAIL resources at ffdf3bb5d: lead"
    assert said["disk_truncated"] == "at ATOM's main: FAIL correctness at ffdf3bb5d: lmcache lead"
    assert said["prefix_reuse"] == "at ATOM's main: PASS at ffdf3bb5d"
    for name, line in said.items():
        assert line == f"at ATOM's main: {at_main.at_main(name).line()}", name


@pytest.mark.parametrize(
    "row, verdict, detail, pinned, agrees",
    [
        ("prefix_reuse", "PASS", "no stop", True, True),
        ("prefix_reuse", "FAIL", "correctness: output of again differs", True, False),
        ("prefix_reuse", "FAIL", "correctness: output of again differs", False, False),
        ("prefix_reuse", "ERROR", "timed out", True, False),
        ("chunk_aligned", "FAIL", "efficiency: again: transfers [0, 255) off the grid", True, True),
        ("chunk_aligned", "PASS", "no stop", True, False),  # declared FAIL, PASSes at main
        ("chunk_aligned", "FAIL", "correctness: output differs", True, False),  # other property
        ("chunk_aligned", "PASS", "no stop", False, True),  # fixed in another checkout
        ("chunk_aligned", "FAIL", "correctness: output differs", False, False),
        ("lost_hit_reply", "PASS", "no stop", False, True),
        ("disk_truncated", "PASS", "no stop", False, False),  # lmcache's: fails anywhere
        ("disk_truncated", "FAIL", "correctness: restored pages differ", False, True),
        ("hung_retrieve", "NOT EXERCISED", "", True, False),
    ],
)
def test_a_verdict_that_differs_from_the_declaration_is_named(row, verdict, detail, pinned, agrees):
    said = disagreement(row, verdict, detail, pinned)
    assert (said is None) == agrees, said
    if said is not None:
        assert said.startswith(f"{row}: {verdict}") and "declared" in said
