"""Expected endings (kvfault.faults.runs.Expect): every scenario, fault and regression row
declares how its run must end, and the campaign fails any other ending, naming it.

The breaks here are ones no property notices, so only the judge's expectation can."""

from __future__ import annotations

import dataclasses

import pytest

from kvfault.faults import SCENARIOS
from kvfault.faults import campaign as cm
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.injectors import INJECTORS
from kvfault.faults.properties import PROPERTIES
from kvfault.faults.regressions import REGRESSIONS
from kvfault.faults.runs import Ending, Expect, finishes, refuses, stops
from kvfault.faults.verdicts import Verdict
from kvfault.reference.rules import EngineIdentity
from kvfault.reference.stack import Scheduler


def test_every_catalog_entry_declares_its_ending():
    assert all(isinstance(s.expect, Expect) for s in SCENARIOS.values())
    assert all(isinstance(i.expect, Expect) for i in INJECTORS.values())
    assert all(r.legacy_expect for r in REGRESSIONS.values())


def test_an_expectation_is_complete():
    with pytest.raises(ValueError, match="names its error"):
        Expect("refuse")
    with pytest.raises(ValueError, match="operation kind and its bound, or neither"):
        Expect("stop", "LoadNotTerminal", "load")
    with pytest.raises(ValueError, match="operation kind and its bound, or neither"):
        Expect("stop", "LoadNotTerminal", within_s=40.0)
    # Neither: a stop with the error on any operation, its timing the properties' call
    # (the real tier's wire faults).
    assert str(Expect("stop", "LoadNotTerminal")) == "stop with LoadNotTerminal"
    with pytest.raises(ValueError, match="finish, stop or refuse"):
        Expect("anything")


@pytest.mark.parametrize(
    "expect, got, ok",
    [
        (finishes(), Ending("finish"), True),
        (finishes(), Ending("stop", "LoadNotTerminal", "load", 40.0), False),
        (finishes(), Ending("hang"), False),
        (
            stops("LoadNotTerminal", "load", 61.0),
            Ending("stop", "LoadNotTerminal", "load", 40),
            True,
        ),
        (
            stops("LoadNotTerminal", "load", 61.0),
            Ending("stop", "LoadNotTerminal", "load", 75),
            False,
        ),
        (
            stops("LoadNotTerminal", "load", 61.0),
            Ending("stop", "TransferUnprovable", "load", 9),
            False,
        ),
        (
            stops("LoadNotTerminal", "load", 61.0),
            Ending("stop", "LoadNotTerminal", None, 40),
            False,
        ),
        (stops("LoadNotTerminal", "load", 61.0), Ending("finish"), False),
        (refuses("EngineIdentityConflict"), Ending("refuse", "EngineIdentityConflict"), True),
        (refuses("EngineIdentityConflict"), Ending("finish"), False),
    ],
)
def test_unmet_compares_every_part_of_the_ending(expect, got, ok):
    assert (expect.unmet(got) is None) is ok


def _judge(target) -> object:
    return CaseRunner().run(Case(target, 0))


def test_a_false_stop_no_property_sees_fails_the_scenario_row(monkeypatch):
    """The stack checks load bounds before applying its inbox and falsely stops in
    restart_burst; with the stop properties blinded, the row still fails on its
    declared ending (before: PASS "stopped correctly")."""
    apply, check = Scheduler.apply, Scheduler.check_bounds

    def deferred(self, completions):
        self._deferred = list(completions)

    def check_then_apply(self):
        check(self)
        apply(self, getattr(self, "_deferred", []))
        self._deferred = []

    monkeypatch.setattr(Scheduler, "apply", deferred)
    monkeypatch.setattr(Scheduler, "check_bounds", check_then_apply)
    for prop in ("no_false_stop", "liveness", "exactly_once"):
        monkeypatch.setitem(PROPERTIES, prop, lambda run: [])
    out = _judge(cm.scenario_target("small_restart_burst"))
    assert out.verdict == Verdict.FAIL
    assert "expected to run to the end; it stopped with LoadNotTerminal on a load" in out.signature


def test_a_startup_refusal_fails_a_row_that_must_run(monkeypatch):
    """Two servers whose engine ids ignore the port refuse to start: no property is
    violated (nothing bound twice), and the scenario row used to pass."""
    monkeypatch.setattr(EngineIdentity, "engine_id", lambda self, port, rank: f"same-dp{rank}")
    out = _judge(cm.scenario_target("two_servers"))
    assert not out.violations
    assert out.verdict == Verdict.FAIL
    assert "it refused to start with EngineIdentityConflict" in out.signature


def test_a_fault_that_must_stop_fails_when_the_stack_runs_on():
    """lost_completion's row must stop with LoadNotTerminal; declared otherwise, the
    same run fails the row."""
    info = INJECTORS["lost_completion"]
    out = CaseRunner().run(Case(cm.fault_target("lost_completion"), 0))
    assert out.ok, out.signature
    INJECTORS["lost_completion"] = dataclasses.replace(info, expect=finishes())
    try:
        out = CaseRunner().run(Case(cm.fault_target("lost_completion"), 0))
    finally:
        INJECTORS["lost_completion"] = info
    assert out.verdict == Verdict.FAIL
    assert "it stopped with LoadNotTerminal on a load" in out.signature


def test_an_entry_without_an_expectation_is_an_error_not_a_fail(monkeypatch):
    # A catalog mistake (exit 2), not a fault of the stack under test (exit 1).
    entry = dataclasses.replace(SCENARIOS["two_images"], expect=None)
    monkeypatch.setitem(SCENARIOS, "two_images", entry)
    out = _judge(cm.scenario_target("two_images"))
    assert out.verdict == Verdict.ERROR, out.signature
    assert out.signature == (
        "UndeclaredEnding: two_images: its catalog entry declares no expected ending"
    )
    info = INJECTORS["slow_forward"]
    monkeypatch.setitem(INJECTORS, "slow_forward", dataclasses.replace(info, expect=None))
    out = _judge(cm.fault_target("slow_forward"))
    assert out.verdict == Verdict.ERROR and "declares no expected ending" in out.signature


def test_a_legacy_run_that_ends_otherwise_is_not_reproduced(monkeypatch):
    reg = REGRESSIONS["hybrid_last_chunk"]
    monkeypatch.setitem(
        REGRESSIONS,
        "hybrid_last_chunk",
        dataclasses.replace(reg, legacy_expect=(stops("LoadNotTerminal", "load", 61.0),)),
    )
    out = _judge(cm.regression_target("hybrid_last_chunk"))
    assert out.verdict == Verdict.NOT_REPRODUCED
    assert "the legacy stack was expected to stop with LoadNotTerminal" in out.signature
    assert "it ran to the end" in out.signature
