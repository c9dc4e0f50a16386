"""The scheduler's load bounds (docs/design.md#load-bounds, fix 6): the rule's own class here; the
scheduler applying it in test_scheduler.py; its scenarios (a restart burst of 64 behind
slow forwards, a lost completion in the middle of one) in test_scenarios.py."""

from __future__ import annotations

import pytest

from kvfault.fakes import Workloads
from kvfault.reference import OperationId
from kvfault.reference.rules import LoadBounds

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


def test_a_variant_that_restarts_other_loads_keeps_each_start_apart():
    """A variant's ``dispatched_after`` need not name the suffix: only the loads it
    names get a fresh bound (the rule's own class takes its suffix on trust)."""

    class EveryOther(LoadBounds):
        def dispatched_after(self, op):
            order = list(self._active)
            return order[order.index(op) + 1 :: 2]

    b = EveryOther(BOUND)
    o = ops(6)
    for op in o:
        b.dispatched(op, 0.0)
    assert b.terminal(o[0], 30.0, finished=True) == [o[1], o[3], o[5]]
    for op in (o[1], o[3], o[5]):  # restarted at 30: their bounds run to 70
        b.terminal(op, 30.0, finished=False)
    assert b.overdue(40.5) == (o[2], pytest.approx(40.5))  # o[2] and o[4] kept 0


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


class _Eager:
    """The rule as first written: every start kept per load and rewritten on a restart."""

    def __init__(self, bound_s, after):
        self.bound_s, self.after, self.active = bound_s, after, {}

    def terminal(self, op, now, finished):
        if op not in self.active:
            return []
        behind = self.after(list(self.active), op) if finished else []
        del self.active[op]
        for later in behind:
            self.active[later] = now
        return behind

    def overdue(self, now):
        for op, start in self.active.items():
            if now - start > self.bound_s:
                return op, now - start
        return None

    def next_expiry(self):
        return min(self.active.values()) + self.bound_s if self.active else None


def _suffix(order, op):
    return order[order.index(op) + 1 :]


def _every_other(order, op):  # a restart that is not a suffix: starts are kept one by one
    return [o for o in order if o != op][::2]


class _EveryOther(LoadBounds):
    def dispatched_after(self, op):
        return _every_other(list(self._active), op)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("variant", ["fixed", "every_other"])
def test_starts_kept_per_suffix_agree_with_starts_kept_per_load(seed, variant):
    import random

    rng = random.Random(seed)
    fast = LoadBounds(BOUND) if variant == "fixed" else _EveryOther(BOUND)
    slow = _Eager(BOUND, _suffix if variant == "fixed" else _every_other)
    o = ops(40, seed)
    now, sent = 0.0, 0
    back_at = rng.randrange(10, 120) if seed % 2 else -1
    for step in range(120):
        # Time grows; in half the runs it goes back once (a caller may hand any time in).
        now = max(0.0, now + (-25.0 if step == back_at else rng.choice([0.0, 0.5, 3.0, 12.0])))
        if sent < len(o) and (not slow.active or rng.random() < 0.4):
            fast.dispatched(o[sent], now)
            slow.active[o[sent]] = now
            sent += 1
        elif slow.active:
            live = list(slow.active)
            op = live[0] if rng.random() < 0.3 else rng.choice(live)
            finished = rng.random() < 0.8
            assert fast.terminal(op, now, finished) == slow.terminal(op, now, finished)
        probe = now + rng.choice([0.0, 20.0, 39.0, 41.0, 60.0])
        assert fast.overdue(probe) == slow.overdue(probe)
        assert fast.next_expiry() == slow.next_expiry()
        assert len(fast) == len(slow.active)


def test_a_restart_behind_a_later_finish_survives_a_time_going_back():
    """c finishes while a and b are still active: d's bound restarts at 10. A dispatch
    at an earlier time then makes the bounds keep each start on its own: d's must
    still be 10."""
    b = LoadBounds(BOUND)
    a, b_, c, d, e = ops(5)
    for op in (a, b_, c, d):
        b.dispatched(op, 0.0)
    assert b.terminal(c, 10.0, True) == [d]
    b.dispatched(e, 5.0)
    b.terminal(a, 12.0, False)
    b.terminal(b_, 12.0, False)
    assert b.overdue(45.1) == (e, pytest.approx(40.1))
    b.terminal(e, 46.0, False)
    assert b.overdue(50.0) is None
    assert b.overdue(50.5) == (d, pytest.approx(40.5))
    assert b.next_expiry() == 50.0
