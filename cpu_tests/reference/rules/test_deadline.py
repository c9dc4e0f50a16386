"""The worker's transfer deadline (docs/design.md#restores-and-the-transfer-deadline, fix 5): which clock runs. The rule's own
class here; the worker applying it in test_worker.py; its scenario (a restart burst
behind a 29 s first forward) in test_scenarios.py."""

from __future__ import annotations

import pytest

from kvfault.reference.rules import LoadClock, RestoreDeadline

d = RestoreDeadline()


def test_default_and_validation():
    assert d.deadline_s == 30.0
    with pytest.raises(ValueError):
        RestoreDeadline(0)
    with pytest.raises(ValueError):
        RestoreDeadline(-5)


def test_a_pending_retrieve_runs_from_its_submission():
    assert d.clock_start(LoadClock(submitted_at=3.0)) == 3.0


def test_retrieved_and_waiting_for_a_slot_runs_no_clock():
    """Queued behind others for a restore slot: the scheduler's bound covers it."""
    assert d.clock_start(LoadClock(submitted_at=3.0, retrieved_at=4.0)) is None


def test_an_enqueued_copy_runs_from_its_enqueue():
    clock = LoadClock(submitted_at=0.0, retrieved_at=1.0, enqueued_at=35.0)
    assert d.clock_start(clock) == 35.0


def test_a_fence_error_keeps_the_submission_clock():
    clock = LoadClock(submitted_at=2.0, retrieved_at=4.0, fence_failed=True)
    assert d.clock_start(clock) == 2.0


def test_a_fence_that_later_enqueues_runs_from_the_enqueue():
    clock = LoadClock(submitted_at=2.0, retrieved_at=4.0, enqueued_at=9.0, fence_failed=True)
    assert d.clock_start(clock) == 9.0


def test_a_slow_forward_does_not_use_up_the_copys_deadline():
    """The seed's failure: retrieve submitted at 0, a 29 s first forward and a 21 s step
    pass before a slot frees; the copy enqueued at 50 s still has its whole deadline."""
    clock = LoadClock(submitted_at=0.0, retrieved_at=0.5, enqueued_at=50.0)
    start = d.clock_start(clock)
    assert start == 50.0
    assert 79.0 - start <= d.deadline_s
