"""Each property against a stack broken on purpose (a monkeypatched collaborator of
``reference/``, never an edit): the healthy stack passes, the broken one is caught.

These are the hand-made breaks that showed each property catches what nothing caught
before it; a property weakened until it misses its break goes red here.
"""

from __future__ import annotations

import pytest

from faults.campaign.execute import run_case
from reference.stack.scheduler import Scheduler


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
