"""Each property against a stack broken on purpose (a monkeypatched collaborator of
``reference/``, never an edit): the healthy stack passes, the broken one is caught.

These are the hand-made breaks that showed each property catches what nothing caught
before it; a property weakened until it misses its break goes red here.
"""

from __future__ import annotations

import pytest

from faults.campaign import run_case
from reference.stack import Scheduler


def _props(result) -> set[str]:
    return {v.prop for v in result.violations}


@pytest.fixture
def bounds_before_apply(monkeypatch):
    """The scheduler checks its load bounds before applying the completions already
    in its inbox: a finished load's bound runs out although its completion arrived."""
    apply, check = Scheduler.apply, Scheduler.check_bounds

    def deferred_apply(self, completions):
        self._deferred = list(completions)

    def check_then_apply(self):
        check(self)
        apply(self, getattr(self, "_deferred", []))
        self._deferred = []

    monkeypatch.setattr(Scheduler, "apply", deferred_apply)
    monkeypatch.setattr(Scheduler, "check_bounds", check_then_apply)


def test_no_false_stop_holds_on_the_healthy_burst():
    assert "no_false_stop" not in _props(
        run_case("small_restart_burst", 0, properties=["no_false_stop"])
    )


def test_a_stop_on_a_delivered_but_unapplied_completion_is_false(bounds_before_apply):
    res = run_case("small_restart_burst", 0, properties=["no_false_stop"])
    assert res.stop and "LoadNotTerminal" in res.stop
    (v,) = [v for v in res.violations if v.prop == "no_false_stop"]
    assert "had reached the scheduler" in v.message


def test_a_lost_completion_still_justifies_the_stop():
    res = run_case("lost_completion_burst", 0, properties=["no_false_stop", "liveness"])
    assert res.stop and "LoadNotTerminal" in res.stop
    assert res.ok, [str(v) for v in res.violations]


# -- efficiency ---------------------------------------------------------------------------


def test_efficiency_holds_on_the_healthy_stack():
    assert "efficiency" not in _props(run_case("restart_tier_kept", 0, properties=["efficiency"]))


def test_a_lookup_that_never_matches_its_saves_is_a_silent_miss(monkeypatch):
    """The scheduler asks the tier with ids that are not the ones it saves under:
    outputs stay right (it recomputes), only efficiency sees the loss."""
    import reference.stack.scheduler as sched

    query = sched.LookupQuery
    monkeypatch.setattr(
        sched, "LookupQuery", lambda ids, states: query(tuple(i ^ 1 for i in ids), states)
    )
    res = run_case("restart_tier_kept", 0, properties=["correctness", "efficiency"])
    assert _props(res) == {"efficiency"}
    assert any("silent miss" in v.message for v in res.violations)


def test_a_claim_never_loaded_is_caught(monkeypatch):
    """The scheduler claims a tier hit and then starts from its HBM hit (loads nothing)."""
    monkeypatch.setattr(
        Scheduler,
        "_dispatch_load",
        lambda self, seq, plan, meta: self._start_running(seq, seq.hbm_hit),
    )
    res = run_case("restart_tier_kept", 0, properties=["correctness", "efficiency"])
    assert _props(res) == {"efficiency"}
    assert any("never loaded" in v.message for v in res.violations)


# -- exactly once -------------------------------------------------------------------------


def test_exactly_once_holds_on_the_healthy_stack():
    res = run_case("restart_burst", 0, properties=["exactly_once"])
    assert res.ok, [str(v) for v in res.violations]


def test_a_reused_operation_id_is_caught(monkeypatch):
    monkeypatch.setattr(Scheduler, "_next_generation", lambda self: 1)
    res = run_case("restart_tier_kept", 0, properties=["correctness", "exactly_once"])
    assert "exactly_once" in _props(res)
    assert any("operation id reused" in v.message for v in res.violations)


# -- resources ----------------------------------------------------------------------------


def test_resources_hold_on_the_healthy_stack():
    res = run_case("two_images", 0, properties=["resources"])
    assert res.ok, [str(v) for v in res.violations]


def test_a_finished_request_that_keeps_its_blocks_is_caught(monkeypatch):
    """The scheduler forgets to free a finished request's HBM blocks: with a pool this
    large nothing else notices."""
    from reference.stack import BlockPool, UncachedBlockPool

    for pool in (BlockPool, UncachedBlockPool):  # whichever the scenario's engine takes
        monkeypatch.setattr(pool, "free", lambda self, blocks: None)
    res = run_case("two_images", 0, properties=["correctness", "liveness", "resources"])
    assert _props(res) == {"resources"}
    assert any("hbm_blocks=" in v.message for v in res.violations)


def test_a_late_completion_meets_a_reused_operation_id(monkeypatch):
    """Operation ids that start again with every engine build: a completion from
    before a crash arrives after it and is applied to the new scheduler's load of the
    same request, whose pages were never copied (the fixed stack continues the ids)."""
    from faults.injectors import FaultPlan, FaultSpec
    from reference.stack import Engine

    plan = FaultPlan((FaultSpec.of("late_completion", nth=[1]),), 0)
    healthy = run_case("late_completion_after_restart", 0, injectors=plan.injectors)
    assert healthy.ok and healthy.fired["late_completion"] == 1, healthy.violations
    build = Engine._build
    monkeypatch.setattr(Engine, "_build", lambda self, generation: build(self, 0))
    res = run_case("late_completion_after_restart", 0, injectors=plan.injectors)
    assert {"correctness", "exactly_once"} <= _props(res)
    assert any("operation id reused" in v.message for v in res.violations)


# -- correctness, with cold runs shared between runs -------------------------------------


def test_correctness_judges_each_run_against_the_cold_run_whatever_ran_before():
    """The cold outputs one run's check computed are kept for the next run of the same
    scenario and seed. They are the cold run's, never what a run produced, and they
    belong to whole requests (a picture's cache seed included): a wrong run is caught
    before and after a right one, and the right one passes."""
    from faults.regressions import REGRESSIONS

    def check(rules=None):
        return run_case("two_images", 5, rules=rules, properties=["correctness"])

    legacy = REGRESSIONS["side_chain_seed"].rules  # outputs differ from the cold run's
    first, right, again = check(legacy), check(), check(legacy)
    assert [v.message for v in right.violations] == []
    for wrong in (first, again):
        assert any("differs from its cold run" in v.message for v in wrong.violations)
