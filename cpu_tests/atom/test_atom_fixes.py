"""The candidate fixes of ATOM's findings (``--atom-fix``) and their proof on one commit
(``faults.atom.fix_proof``): every fix names a row, an unknown fix is one line and exit
2, and a proof flips its row with the recorded path, or says NOT FIXED when the fix
does not fix the row it is run against."""

from __future__ import annotations

import os
import subprocess
import sys

from faults.atom.catalog import ROWS
from faults.atom.fix_proof import judge, path_difference
from faults.atom.fixes import FIXES


def test_every_fix_is_named_for_a_row_and_names_its_atom_function():
    for name, fix in FIXES.items():
        assert name in ROWS and fix.target.startswith("atom/"), name


def test_an_unknown_fix_is_one_line_and_exit_2(atom_src):
    proc = subprocess.run(
        [sys.executable, "-m", "faults.cli", "run", "--tier", "atom", "--atom-src", atom_src,
         "--atom-fix", "nope", "--scenario", "chunk_aligned"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--atom-fix 'nope' is no fix; known: " + ", ".join(FIXES))
    )


def test_path_difference_groups_lines_by_function_in_spans():
    ran = {("atom/a.py", "f", n) for n in (3, 4, 5, 9)} | {("atom/b.py", "g", 1)}
    other = {("atom/a.py", "f", 4), ("atom/b.py", "g", 1)}
    assert path_difference(ran, other) == ["atom/a.py:3 f: 3, 5, 9"]
    ran.add(("atom/a.py", "f", 6))
    assert path_difference(ran, other) == ["atom/a.py:3 f: 3, 5-6, 9"]


def _proof(atom_src: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faults.atom.fix_proof", *args, "--atom-src", atom_src],
        capture_output=True, text=True, timeout=900, env=dict(os.environ),
    )  # fmt: skip


def test_a_fix_is_proved_with_its_recorded_path(atom_src):
    proc = _proof(atom_src, "chunk_aligned", "--row", "chunk_aligned", "--row", "prefix_reuse")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "chunk_aligned  FAIL     PASS" in out and "prefix_reuse   PASS     PASS" in out
    # The failing run's own path: the load fails on the partial chunk, ATOM recomputes.
    assert "dense/connector.py" in out and out.rstrip().endswith(
        "FIXED: chunk_aligned FAIL -> PASS; every other row kept its verdict"
    )


def test_a_proof_holds_only_when_its_row_flips_and_nothing_else_moves():
    without = {"chunk_aligned": "FAIL", "prefix_reuse": "PASS", "two_images": "FAIL"}
    assert judge("chunk_aligned", without, {**without, "chunk_aligned": "PASS"})[0]
    stays = judge("chunk_aligned", without, without)
    assert stays == (False, "NOT FIXED: chunk_aligned FAIL -> FAIL")
    moved = judge(
        "chunk_aligned", without, {**without, "chunk_aligned": "PASS", "prefix_reuse": "FAIL"}
    )
    assert moved == (
        False,
        "NOT FIXED: chunk_aligned FAIL -> PASS; other rows changed: prefix_reuse",
    )
