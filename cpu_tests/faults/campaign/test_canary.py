"""Canary: every planted regression must make the property suite fail, with its signature.

Each planted regression (kvfault.faults.regressions.legacy) is swapped into the stack in turn and its
scenario is judged by kvfault.faults.properties.checks. If a property is weakened so that it no longer
sees the legacy behaviour it exists for, its canary goes red here: a green property
suite proves something only while these fail the legacy stack.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfault.faults import SCENARIOS
from kvfault.faults.campaign import run_case
from kvfault.faults.properties import PROPERTIES
from kvfault.faults.regressions import REGRESSIONS, Regression


def _trace_properties(reg: Regression) -> list[str]:
    # Determinism re-runs the scenario; no regression is caught by it, so the canary
    # saves the second run.
    return [p for p in SCENARIOS[reg.scenario].properties if p != "determinism"]


def legacy_violations(reg: Regression, seed: int = 0) -> set[str]:
    """The properties the legacy stack violates on the regression's scenario."""
    result = run_case(reg.scenario, seed, rules=reg.rules, properties=_trace_properties(reg))
    return {v.prop for v in result.violations}


# Every regression shows on the campaign's first seed under any PYTHONHASHSEED: the
# hash-order one runs on loaded_restart_burst, where a set order that keeps the engine
# alive is vanishingly rare (docs/regressions/restart_numbering_in_hash_order.md). So
# one seed suffices, and a regression that stops showing on it turns the canary red;
# `tox -e hashseed` runs this module under hash seeds 0-15.
@pytest.mark.parametrize("name", list(REGRESSIONS))
def test_planted_regression_fails_with_its_signature(name):
    reg = REGRESSIONS[name]
    assert reg.signature in PROPERTIES, f"{name}: signature {reg.signature!r} is not a property"
    violated = legacy_violations(reg)
    assert violated, f"{name}: the legacy stack passed every property of {reg.scenario}"
    assert reg.signature in violated, (
        f"{name}: the legacy stack failed {sorted(violated)}, not its signature {reg.signature}"
    )


@pytest.mark.parametrize("scenario", sorted({r.scenario for r in REGRESSIONS.values()}))
def test_the_fixed_stack_passes_where_a_regression_is_planted(scenario):
    """The other half of each A/B: the same scenario and seed on the fixed stack."""
    result = run_case(
        scenario,
        0,
        properties=_trace_properties(
            next(r for r in REGRESSIONS.values() if r.scenario == scenario)
        ),
    )
    assert result.ok, "\n".join(map(str, result.violations))


def test_a_weakened_property_is_noticed(monkeypatch):
    """What the canary is for: blind the hybrid property and its canary fails."""
    reg = REGRESSIONS["hybrid_last_chunk"]
    monkeypatch.setitem(PROPERTIES, reg.signature, lambda run: [])
    assert reg.signature not in legacy_violations(reg)


def test_every_signature_is_caught_by_some_canary():
    """No property in the catalog is left without a regression that keeps it honest,
    except those whose legacy behaviour is not planted (listed here on purpose)."""
    # No rule variant breaks these (they judge the stack's bookkeeping, not its rules:
    # which ids a load sends, who holds an HBM block):
    # cpu_tests/faults/properties/test_breaks.py breaks the stack for each instead.
    by_breaks = {"exactly_once", "resources", "load_failures", "hbm_owners"}
    # Only the atom tier records what an answer reports: its canary is ATOM's own fix
    # c9aad60 (docs/atom/history.md row 15), proved FIXED by cpu_tests/atom.
    by_atom_history = {"usage"}
    # A Property class names the test that breaks the stack for it (proven_by).
    by_own_test = {n for n, p in PROPERTIES.classes.items() if _names_a_test(p.proven_by)}
    unguarded = (
        set(PROPERTIES)
        - {r.signature for r in REGRESSIONS.values()}
        - by_breaks
        - by_atom_history
        - by_own_test
    )
    assert unguarded == set(), f"properties no planted regression exercises: {sorted(unguarded)}"


def _names_a_test(node: str) -> bool:
    """Whether ``node`` (``path::test``) names a test function that exists."""
    path, _, name = node.partition("::")
    file = Path(__file__).resolve().parents[3] / path
    return bool(name) and file.is_file() and f"def {name}(" in file.read_text()
