"""ATOM's own offload fixes as a benchmark (docs/atom/history.md): the doc's one-command
reproductions, each a ``kvfault prove`` of one ATOM fix, parsed from its
"Reproductions" section. Every command must name a row of the atom tier and, in a
checkout with ATOM's history, commits that exist; a sample is run every time and must
say FIXED: the two fixes checked by hand first (4d0b15f, #1882, identity; 9acb084,
#1725, efficiency), the lookup-pin leak (7427e05, #1807, resources) and the refused
local disk (15ebe26, #1851, efficiency: a setting, no timing).
``KVFAULT_ATOM_HISTORY=all`` runs every reproduction."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults.atom.catalog import ROWS

DOC = Path(__file__).resolve().parents[2] / "docs" / "atom" / "history.md"
SAMPLE = ("4d0b15f", "9acb084", "7427e05", "15ebe26")  # proved on every run (CI)


def reproductions() -> dict[str, list[str]]:
    """Each command of the doc's Reproductions section (its text -> its argv)."""
    text = DOC.read_text()
    section = text.split("## Reproductions", 1)[1].split("\n## ", 1)[0]
    return {
        line: shlex.split(line)
        for line in section.splitlines()
        if line.startswith("kvfault prove ")
    }


def _revs(argv: list[str]) -> tuple[str, str]:
    return argv[argv.index("--old") + 1], argv[argv.index("--new") + 1]


def _sampled() -> list[str]:
    """The fixes proved on every run: the first reproduction of each SAMPLE commit."""
    lines = reproductions()
    out = []
    for fix in SAMPLE:
        out.append(next(line for line, argv in lines.items() if _revs(argv) == (f"{fix}^", fix)))
    return out


def _in_checkout(src: str, rev: str) -> bool:
    out = subprocess.run(
        ["git", "-C", src, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return out.returncode == 0


def test_the_doc_names_a_reproduction_for_each_sampled_fix():
    assert len(_sampled()) == len(SAMPLE)


@pytest.mark.parametrize("line", sorted(reproductions()))
def test_each_reproduction_names_a_row_and_pins_how_the_old_side_fails(line):
    argv = reproductions()[line]
    old, new = _revs(argv)
    assert f"{new}^" == old or f"{old}^" == new, (old, new)  # a fix, or a regression swapped
    inner = argv[argv.index("--") + 1 :]
    assert inner[:4] == ["kvfault", "run", "--tier", "atom"]
    named = [inner[i + 1] for i, a in enumerate(inner) if a in ("--scenario", "--fault")]
    assert named and all(n in ROWS for n in named), named
    expect = argv[argv.index("--expect") + 1]  # how the old side must fail
    prop = re.match(r"(\w+):", expect)
    assert prop and all(prop.group(1) in ROWS[n].properties for n in named), expect
    # Judged by that property alone: other bugs of the same commit must not decide it.
    judged = [inner[i + 1] for i, a in enumerate(inner) if a == "--property"]
    assert judged == [prop.group(1)], judged


def _selected() -> list[str]:
    if os.environ.get("KVFAULT_ATOM_HISTORY") == "all":
        return sorted(reproductions())
    return _sampled()


@pytest.mark.parametrize("line", _selected())
def test_the_reproduction_proves_the_fix(line, atom_src, pytestconfig):
    argv = reproductions()[line]
    old, new = _revs(argv)
    if not (_in_checkout(atom_src, old) and _in_checkout(atom_src, new)):
        pytest.skip(f"{atom_src} does not hold ATOM's {old} and {new}")
    inner = argv.index("--")
    # The doc's commands, with this interpreter for ``kvfault`` (the console script
    # need not be on PATH in a test environment).
    cmd = [sys.executable, "-m", "kvfault.faults.prove", "-C", atom_src, *argv[2:inner], "--"]
    cmd += [sys.executable, "-m", "kvfault.faults.cli", *argv[inner + 2 :]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:  # the proof in the test log
        reporter.write_line("")
        for line in proc.stdout.splitlines()[-8:]:
            reporter.write_line(line)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1].startswith("FIXED"), proc.stdout[-2000:]
