"""PYTHONHASHSEED sweep (faults/sweep.py, ``kvfault sweep``), run for real.

The demonstration: over hash seeds 0-15, in one subprocess per seed, the legacy
restart numbering (``HashOrderBounds``) stops a healthy engine under some seeds and
not others, while the fixed stack passes under all of them. The test it sweeps is
``cpu_tests/faults/injectors/test_hash_order.py::test_restart_numbering_loads_dispatched_together``
(8 loads in one step: the 64-restore burst fails the legacy rule under nearly every
seed, so it cannot show the split).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults.sweep import (
    SeedOutcome,
    SweepError,
    SweepResult,
    format_result,
    parse_seeds,
    sweep,
)

ROOT = Path(__file__).resolve().parents[2]

# One small dedicated module runs the 8-loads scenario under both rule sets, so one
# sweep (one child per seed) shows both sides: the fixed test never fails, the legacy
# one fails under some seeds only.
SPLIT = f"""
import importlib.util

from kvfault.faults.regressions import REGRESSIONS
from kvfault.reference import Rules
from kvfault.faults.campaign import check

_spec = importlib.util.spec_from_file_location("hash_order", {str(ROOT / "cpu_tests" / "faults" / "injectors" / "test_hash_order.py")!r})
hash_order = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hash_order)


def _violations(rules):
    return check(hash_order.loads_dispatched_together(0, rules), ["no_false_stop", "liveness"])


def test_fixed():
    assert not _violations(Rules())


def test_legacy():
    violations = _violations(REGRESSIONS["restart_numbering_in_hash_order"].rules)
    assert not violations, "\\n".join(map(str, violations))
"""

# Each child: quiet, no conftest, no hypothesis, faker or xdist plugin (their imports
# cost more than the test), no cache writes, plain asserts (rewriting every plugin
# module again in each child costs more than the test where bytecode is not cached).
# One extra seed is then one short subprocess.
CHILD = [
    "test_split.py", "-q", "--noconftest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
    "-p", "no:faker", "-p", "no:xdist", "--assert=plain",
]  # fmt: skip


@pytest.mark.parametrize(
    "text, seeds",
    [
        ("0-3", [0, 1, 2, 3]),
        ("7", [7]),
        ("0-2,5,4-5", [0, 1, 2, 5, 4]),
        (" 1 - 2 ".replace(" ", ""), [1, 2]),
    ],
)
def test_parse_seeds(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "3-1", "0-", "-1", "1,,2", "0-4294967296"])
def test_bad_seed_ranges_are_one_line(text):
    with pytest.raises(SweepError) as exc:
        parse_seeds(text)
    assert "\n" not in str(exc.value)


def test_exit_status_and_report():
    ok = SeedOutcome(0, 0, "1 passed in 0.1s")
    bad = SeedOutcome(1, 1, "1 failed in 0.1s", ["t.py::test_x"], tail="E assert 0")
    broken = SeedOutcome(2, 4, "ERROR: usage")
    assert SweepResult([ok], []).exit_code == 0
    assert SweepResult([ok, bad, broken], []).exit_code == 1
    assert SweepResult([ok, broken], []).exit_code == 2
    text = format_result(SweepResult([ok, bad], ["t.py", "-q"], 2.0))
    assert "PYTHONHASHSEED=1    FAILED   1 failed in 0.1s  (t.py::test_x)" in text
    assert "2 hash seeds: 1 passed, 1 failed (seeds 1); 2.00s wall, 1.00s per seed" in text
    assert text.splitlines()[-1] == "replay: PYTHONHASHSEED=1 python -m pytest t.py -q"


def test_hash_order_regression_fails_under_some_seeds_and_the_fix_under_none(tmp_path):
    (tmp_path / "test_split.py").write_text(SPLIT)
    seeds = parse_seeds("0-15")
    result = sweep(seeds, CHILD, cwd=tmp_path, jobs="2")  # seeds over 2 xdist workers
    report = format_result(result)
    assert [s.seed for s in result.seeds] == seeds
    assert all(s.exit_code in (0, 1) for s in result.seeds), report
    assert all(s.failed in ([], ["test_split.py::test_legacy"]) for s in result.seeds), report
    # hash order decides: the legacy rule fails under some seeds, not all; the fix never
    assert 0 < len(result.failing) < len(seeds), report
    assert result.exit_code == 1
    for s in (s for s in result.seeds if s.exit_code):
        assert "no_false_stop" in s.tail and "LoadNotTerminal" in s.tail, report


def test_kvfault_sweep_reports_each_seed_and_fails_when_one_does(tmp_path):
    (tmp_path / "test_seed.py").write_text(
        "import os\n\ndef test_not_seed_one():\n    assert os.environ['PYTHONHASHSEED'] != '1'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "sweep", "--hashseeds", "0-1", "--",
         "-q", "-p", "no:cacheprovider", "--noconftest", "test_seed.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "kvfault sweep: PYTHONHASHSEED in 0-1 (2 seeds): "
        "python -m pytest -q -p no:cacheprovider --noconftest test_seed.py"
    )
    assert lines[1].startswith("  PYTHONHASHSEED=0    passed   1 passed in ")
    assert lines[2].startswith("  PYTHONHASHSEED=1    FAILED   1 failed in ")
    assert lines[2].endswith("(test_seed.py::test_not_seed_one)")
    assert "2 hash seeds: 1 passed, 1 failed (seeds 1);" in proc.stdout
    assert lines[-1] == (
        "replay: PYTHONHASHSEED=1 python -m pytest -q -p no:cacheprovider --noconftest test_seed.py"
    )


def test_bad_arguments_exit_2_with_one_line():
    for args in (["--hashseeds", "9-1", "--", "x"], ["--hashseeds", "0-1", "x.py"]):
        proc = subprocess.run(
            [sys.executable, "-m", "kvfault.faults.cli", "sweep", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert proc.returncode == 2
        assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("kvfault: error: ")


def test_a_sweep_over_popen_gateways_gives_what_the_plain_sweep_gives(tmp_path):
    (tmp_path / "test_seed.py").write_text(
        "import os\n\ndef test_not_seed_one():\n    assert os.environ['PYTHONHASHSEED'] != '1'\n"
    )

    def statuses(*spread: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "kvfault.faults.cli", "sweep", "--hashseeds", "0-1", *spread, "--",
             "test_seed.py", *CHILD[1:]],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "2 hash seeds: 1 passed, 1 failed (seeds 1);" in proc.stdout
        # Seeds report as they finish; without the timing, in seed order.
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("  PYTHONHASHSEED=")]
        return sorted(re.sub(r" in [\d.]+s", "", ln) for ln in lines)

    plain = statuses("-j", "0")  # 0 workers: one seed after the other, as without -j
    assert len(plain) == 2
    assert statuses("--tx", "popen", "--tx", "popen") == plain
