"""The scheduler's load bounds (docs/design.md#load-bounds, fix 6): the rule's own class here; the
scheduler applying it in test_scheduler.py; its scenarios (a restart burst of 64 behind
slow forwards, a lost completion in the middle of one) in test_scenarios.py."""

from __future__ import annotations

import pytest

from fakes import Workloads
from reference import OperationId
from reference.rules import LoadBounds

BOUND = 40.0


def ops(n: int, seed: int = 7) -> list[OperationId]:
    """Realistic string ids, so set order over them is hash order (not dispatch order)."""
    w = Workloads(seed)
    return [OperationId(w.request_id(), i + 1) for i in range(n)]


def test_bound_must_be_positive():
    with pytest.raises(ValueError):
        LoadBounds(0)
    with pytest.raises(ValueError):
        LoadBounds(-1)


def test_overdue_counts_from_dispatch():
    b = LoadBounds(BOUND)
    (a,) = ops(1)
    b.dispatched(a, 10.0)
    assert b.is_active(a) and len(b) == 1
    assert b.overdue(50.0) is None  # exactly one bound: not yet past it
    op, elapsed = b.overdue(50.5)
    assert op == a and elapsed == pytest.approx(40.5)


def test_a_finish_restarts_every_load_dispatched_after_it():
    b = LoadBounds(BOUND)
    o = ops(8)
    for op in o:  # all dispatched in one step: only their order tells them apart
        b.dispatched(op, 0.0)
    assert list(set(o)) != o, "ids in hash order equal dispatch order; pick another seed"
    restarted = b.terminal(o[3], 30.0, finished=True)
    assert restarted == o[4:]  # in dispatch order
    assert not b.is_active(o[3])
    # the loads before the finished one keep their old bound...
    assert b.overdue(40.5) == (o[0], pytest.approx(40.5))
    # ...those after it got a fresh one (the others fail, which restarts nothing)
    for op in o[:3]:
        b.terminal(op, 40.5, finished=False)
    assert b.overdue(70.0) is None
    assert b.overdue(70.5)[0] == o[4]


def test_the_finish_of_the_first_load_restarts_all_the_others():
    b = LoadBounds(BOUND)
    o = ops(64)
    for op in o:
        b.dispatched(op, 0.0)
    assert b.terminal(o[0], 35.0, True) == o[1:]
    assert b.overdue(75.0) is None


def test_a_failure_restarts_nothing():
    b = LoadBounds(BOUND)
    o = ops(3)
    for op in o:
        b.dispatched(op, 0.0)
    assert b.terminal(o[0], 30.0, finished=False) == []
    assert not b.is_active(o[0])
    assert b.overdue(40.5)[0] == o[1]


def test_unknown_and_repeated_terminals_are_ignored():
    b = LoadBounds(BOUND)
    o = ops(2)
    b.dispatched(o[1], 0.0)
    assert b.terminal(o[0], 5.0, True) == []
    assert b.terminal(OperationId(o[1].req_id, 99), 5.0, True) == []  # raw id, other generation
    assert b.is_active(o[1])
    assert b.terminal(o[1], 5.0, True) == []
    assert b.terminal(o[1], 6.0, True) == []
    assert len(b) == 0


def test_a_lost_completion_stops_one_bound_after_its_predecessors_finish():
    """Loads finishing after the lost one never restart it; it is overdue one bound
    after the last load dispatched before it finished."""
    b = LoadBounds(BOUND)
    o = ops(10)
    for op in o:
        b.dispatched(op, 0.0)
    lost = o[4]
    t = 0.0
    for op in o[:4]:
        t += 10.0
        b.terminal(op, t, True)  # the last predecessor finishes at t=40
    for i, op in enumerate(o[5:]):
        b.terminal(op, 45.0 + 5 * i, True)
        if b.is_active(lost):
            assert b.overdue(45.0 + 5 * i) is None
    assert b.overdue(80.0) is None
    assert b.overdue(80.01)[0] == lost
    assert b.overdue(80.01)[1] == pytest.approx(40.01)


def test_later_dispatches_wait_their_own_bound():
    b = LoadBounds(BOUND)
    o = ops(3)
    b.dispatched(o[0], 0.0)
    b.dispatched(o[1], 30.0)
    b.dispatched(o[2], 35.0)
    assert b.dispatched_after(o[0]) == o[1:]
    assert b.dispatched_after(o[2]) == []
    assert b.overdue(40.5)[0] == o[0]
    b.terminal(o[0], 41.0, True)
    assert b.overdue(80.9) is None
    assert b.overdue(81.1)[0] == o[1]


def test_an_operation_id_pickles_without_its_cached_hash():
    """The id caches its hash and text; the hash of a string is per process, so a
    pickled id (a sweep's worker sends them) is rebuilt, never carries the cache."""
    import pickle

    (a,) = ops(1)
    data = pickle.dumps(a)
    assert b"_hash" not in data
    b = pickle.loads(data)
    assert b == a and hash(b) == hash(a) and str(b) == str(a)


def test_next_expiry_is_the_earliest_bound_running_out():
    b = LoadBounds(BOUND)
    assert b.next_expiry() is None
    x, y = ops(2)
    b.dispatched(x, 10.0)
    b.dispatched(y, 4.0)
    assert b.next_expiry() == 44.0
    b.terminal(y, 20.0, finished=False)
    assert b.next_expiry() == 50.0
    b.terminal(x, 21.0, finished=True)
    assert b.next_expiry() is None
