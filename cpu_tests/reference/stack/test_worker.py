"""Worker-side restore engine (docs/design.md#restores-and-the-transfer-deadline): in-order two-slot restores, polling only
in ``get_finished``, the transfer deadline's clocks, failures and lost tier replies.

A scripted tier and copy engine let each test decide exactly when a retrieve answers
and when a copy completes, in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvfault.fakes import MemoryTier, SimCopyEngine, SimKvPages, VirtualClock
from kvfault.reference import (
    Completion,
    Ev,
    Geometry,
    LoadOp,
    OperationId,
    OpKind,
    Outcome,
    RestoreFenceError,
    SaveOp,
    Trace,
    TransferUnprovable,
)
from kvfault.reference.interfaces import LookupResult, TierReply
from kvfault.reference.rules import RestoreDeadline
from kvfault.reference.stack import QueueChannel, RestoreWorker

BS = 16


class ScriptedTier:
    chunk_size = 32
    block_size = BS
    state_grid = "block"

    def __init__(self) -> None:
        self.polls = 0
        self.submitted: list[OperationId] = []
        self.replies: dict[object, TierReply] = {}

    def lookup(self, query):
        return LookupResult(0)

    def submit_retrieve(self, op, tier_ids, start, end, state_key):
        self.submitted.append(op)
        return op

    def submit_store(self, op, tier_ids, start, end, pages, states):
        self.submitted.append(op)
        return op

    def poll(self, ticket):
        self.polls += 1
        return self.replies.get(ticket)

    def answer(self, op, ok=True, pages=(11, 12)):
        self.replies[op] = TierReply(ok, list(pages), state=None, error="" if ok else "tier: boom")


class ScriptedCopy:
    def __init__(self) -> None:
        self.polls = 0
        self.enqueued: list[OperationId] = []
        self.done: set[OperationId] = set()
        self.fence: set[OperationId] = set()  # enqueue raises for these

    def enqueue(self, op, pages, blocks, state, req_id):
        if op in self.fence:
            raise RestoreFenceError(f"fence raised for {op}")
        self.enqueued.append(op)
        return op

    def is_complete(self, ticket):
        self.polls += 1
        return ticket in self.done

    def in_flight(self) -> list[OperationId]:
        return [o for o in self.enqueued if o not in self.done]


class Rig:
    def __init__(self, slots: int = 2, deadline_s: float = 30.0) -> None:
        self.clock = VirtualClock()
        self.tier = ScriptedTier()
        self.copy = ScriptedCopy()
        self.kv = SimKvPages(256)
        self.channel = QueueChannel()
        self.trace = Trace(self.clock.now)
        self.worker = RestoreWorker(
            self.clock,
            self.tier,
            self.copy,
            self.kv,
            self.channel,
            self.trace,
            RestoreDeadline(deadline_s),
            slots,
        )

    def loads(self, n: int) -> list[LoadOp]:
        out = []
        for i in range(1, n + 1):
            op = OperationId(f"chatcmpl-{i:03d}", i)
            out.append(LoadOp(op, tuple(range(32)), 32, 32, (2 * i, 2 * i + 1)))
        return out

    def at(self, t: float) -> None:
        self.clock.sleep(t - self.clock.now())

    def poll(self) -> list[Completion]:
        return self.worker.get_finished()

    def enqueue_order(self) -> list[OperationId]:
        return [e.op for e in self.trace.of(Ev.COPY_ENQUEUE)]


@pytest.fixture
def rig() -> Rig:
    return Rig()


def ops_of(loads):
    return [x.op for x in loads]


# -- enqueue only; poll only in get_finished ---------------------------------------------


def test_start_load_only_submits_retrieves(rig):
    loads = rig.loads(4)
    for x in loads:
        rig.tier.answer(x.op)  # the tier is ready at once: still nothing moves
    rig.worker.start_load(loads)
    assert rig.tier.submitted == ops_of(loads)
    assert rig.tier.polls == 0 and rig.copy.polls == 0
    assert rig.copy.enqueued == []
    assert [e.op for e in rig.trace.of(Ev.RETRIEVE_SUBMIT)] == ops_of(loads)
    assert rig.channel.take() == []
    assert rig.worker.has_pending()


def test_polling_happens_only_in_get_finished(rig):
    loads = rig.loads(3)
    rig.worker.start_load(loads)
    for x in loads:
        rig.tier.answer(x.op)
    rig.at(5.0)
    assert rig.tier.polls == 0
    assert rig.copy.enqueued == []
    rig.poll()
    assert rig.tier.polls >= 3
    assert rig.copy.enqueued == ops_of(loads)[:2]
    before = (rig.tier.polls, rig.copy.polls)
    rig.copy.done.update(rig.copy.enqueued)
    rig.at(6.0)  # complete, but nobody polled: nothing reported, nothing enqueued
    assert (rig.tier.polls, rig.copy.polls) == before
    assert rig.copy.enqueued == ops_of(loads)[:2]
    assert rig.channel.take() == []


# -- in order, two at a time ---------------------------------------------------------------


def test_two_slots_in_the_order_received(rig):
    loads = rig.loads(5)
    o = ops_of(loads)
    rig.worker.start_load(loads)
    for op in o:
        rig.tier.answer(op)
    rig.at(1.0)
    assert rig.poll() == []
    assert rig.copy.enqueued == o[:2]
    rig.copy.done.add(o[1])  # the second finishes first
    rig.at(2.0)
    assert rig.poll() == [Completion(o[1], Outcome.FINISHED)]
    assert rig.copy.enqueued == o[:3]
    assert rig.channel.take() == [Completion(o[1], Outcome.FINISHED)]
    rig.copy.done.update(o[:3])
    rig.at(3.0)
    assert [c.op for c in rig.poll()] == [o[0], o[2]]
    assert rig.copy.enqueued == o
    rig.copy.done.update(o)
    rig.at(4.0)
    assert [c.op for c in rig.poll()] == o[3:]
    assert not rig.worker.has_pending()
    assert rig.enqueue_order() == o
    # every operation is reported terminal exactly once
    rig.at(5.0)
    assert rig.poll() == []
    reported = [e.op for e in rig.trace.of(Ev.FINISHED_REPORTED)]
    assert sorted(reported) == sorted(o) and len(reported) == len(set(reported))


def test_nothing_overtakes_a_load_whose_retrieve_is_pending(rig):
    loads = rig.loads(4)
    o = ops_of(loads)
    rig.worker.start_load(loads)
    for op in o[1:]:
        rig.tier.answer(op)
    rig.at(1.0)
    rig.poll()
    assert rig.copy.enqueued == []  # o1 is still retrieving: o2..o4 wait behind it
    rig.tier.answer(o[0])
    rig.at(2.0)
    rig.poll()
    assert rig.copy.enqueued == o[:2]


def test_a_pending_retrieve_in_the_middle_holds_the_rest(rig):
    loads = rig.loads(4)
    o = ops_of(loads)
    rig.worker.start_load(loads)
    for op in (o[0], o[2], o[3]):
        rig.tier.answer(op)
    rig.at(1.0)
    rig.poll()
    assert rig.copy.enqueued == [o[0]]  # one slot stays free: o3 does not overtake o2


def test_one_slot(rig):
    r = Rig(slots=1)
    loads = r.loads(3)
    o = ops_of(loads)
    r.worker.start_load(loads)
    for op in o:
        r.tier.answer(op)
    r.at(1.0)
    r.poll()
    assert r.copy.enqueued == o[:1]
    r.copy.done.add(o[0])
    r.at(2.0)
    r.poll()
    assert r.copy.enqueued == o[:2]


def test_slots_must_be_positive(rig):
    with pytest.raises(ValueError, match="restore slots must be >= 1, got 0"):
        RestoreWorker(
            rig.clock, rig.tier, rig.copy, rig.kv, rig.channel, rig.trace, RestoreDeadline(), 0
        )


@given(
    plan=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=10),
    slots=st.sampled_from([1, 2, 3]),
)
def test_restores_are_in_order_and_never_more_than_the_slots(plan, slots):
    """Any retrieve times and copy durations: copies are enqueued in the order the
    loads were received, at most ``slots`` are in flight, and each load is reported
    finished exactly once."""
    r = Rig(slots=slots)
    loads = r.loads(len(plan))
    o = ops_of(loads)
    r.worker.start_load(loads)
    ready = {op: t for op, (t, _) in zip(o, plan, strict=True)}
    copy_s = {op: c for op, (_, c) in zip(o, plan, strict=True)}
    enqueued_at: dict[OperationId, float] = {}
    finished: list[OperationId] = []
    for tick in range(1, 200):
        r.at(float(tick))
        for op, t in ready.items():
            if t <= tick:
                r.tier.answer(op)
        for op in r.copy.enqueued:
            enqueued_at.setdefault(op, tick - 1)
            if tick - enqueued_at[op] >= copy_s[op]:
                r.copy.done.add(op)
        finished += [c.op for c in r.poll()]
        assert len(r.copy.in_flight()) <= slots
        if not r.worker.has_pending():
            break
    assert r.copy.enqueued == o
    assert r.enqueue_order() == o
    assert sorted(finished) == sorted(o) and len(finished) == len(o)


# -- failures ----------------------------------------------------------------------------


def test_a_failed_retrieve_is_reported_failed_and_takes_no_slot(rig):
    loads = rig.loads(3)
    o = ops_of(loads)
    rig.worker.start_load(loads)
    rig.tier.answer(o[0], ok=False)
    rig.tier.answer(o[1])
    rig.tier.answer(o[2])
    rig.at(1.0)
    out = rig.poll()
    assert out == [Completion(o[0], Outcome.FAILED, "tier: boom")]
    assert rig.channel.take() == out
    assert rig.copy.enqueued == o[1:]
    ev = next(rig.trace.of(Ev.RETRIEVE_TERMINAL))
    assert ev.op == o[0] and ev.data["ok"] is False


def test_a_lost_tier_reply_stops_naming_the_op_and_elapsed(rig):
    loads = rig.loads(2)
    o = ops_of(loads)
    rig.at(2.0)
    rig.worker.start_load(loads)  # submitted at t=2
    rig.tier.answer(o[1])
    rig.at(32.0)
    rig.poll()  # exactly one deadline: not yet
    rig.at(32.25)
    with pytest.raises(TransferUnprovable) as info:
        rig.poll()
    err = info.value
    assert err.op == o[0]
    assert err.elapsed == pytest.approx(30.25)
    assert err.phase == "retrieve"
    assert str(o[0]) in str(err) and "30.250s" in str(err)
    assert "retrieve" in str(err)


def test_the_copys_deadline_counts_from_its_enqueue(rig):
    """The seed's failure: a 29 s first forward and a 21 s step pass between the
    retrieve's submission and the third load's enqueue; its copy still has 30 s."""
    loads = rig.loads(3)
    o = ops_of(loads)
    rig.worker.start_load(loads)  # t=0
    for op in o:
        rig.tier.answer(op)
    rig.at(0.5)
    rig.poll()
    assert rig.copy.enqueued == o[:2]
    rig.copy.done.update(o[:2])
    rig.at(29.5)  # the first forward compiled kernels
    rig.poll()
    assert rig.copy.enqueued == o  # o3 enqueued 29.5 s after its submission
    rig.at(50.5)  # a 21 s step under host load: 50.5 s since submission
    assert rig.poll() == []
    rig.at(59.4)
    rig.poll()
    rig.copy.done.add(o[2])
    rig.at(59.45)
    assert rig.poll() == [Completion(o[2], Outcome.FINISHED)]


def test_a_copy_that_never_completes_still_stops(rig):
    (load,) = rig.loads(1)
    rig.worker.start_load([load])
    rig.tier.answer(load.op)
    rig.at(10.0)
    rig.poll()  # enqueued at t=10
    rig.at(40.0)
    rig.poll()
    rig.at(40.5)
    with pytest.raises(TransferUnprovable) as info:
        rig.poll()
    assert info.value.op == load.op
    assert info.value.phase == "restore copy"
    assert info.value.elapsed == pytest.approx(30.5)


def test_a_fence_error_keeps_the_submission_clock(rig):
    loads = rig.loads(2)
    o = ops_of(loads)
    rig.worker.start_load(loads)  # t=0
    rig.copy.fence.add(o[0])
    for op in o:
        rig.tier.answer(op)
    rig.at(20.0)
    rig.poll()
    assert rig.copy.enqueued == []  # o1's fence raised; o2 stays behind it
    assert [e.op for e in rig.trace.of(Ev.COPY_FENCE_ERROR)] == [o[0]]
    rig.at(30.0)
    rig.poll()
    rig.at(30.5)
    with pytest.raises(TransferUnprovable) as info:
        rig.poll()
    assert info.value.op == o[0]
    assert info.value.elapsed == pytest.approx(30.5)  # from the submission at 0
    assert info.value.phase == "restore copy"


def test_a_fence_that_recovers_runs_the_copy_from_its_enqueue(rig):
    (load,) = rig.loads(1)
    rig.worker.start_load([load])
    rig.copy.fence.add(load.op)
    rig.tier.answer(load.op)
    rig.at(5.0)
    rig.poll()
    rig.copy.fence.clear()
    rig.at(25.0)
    rig.poll()
    assert rig.copy.enqueued == [load.op]
    rig.at(54.0)  # 54 s since submission, 29 s since enqueue
    rig.poll()
    rig.copy.done.add(load.op)
    rig.at(54.5)
    assert rig.poll() == [Completion(load.op, Outcome.FINISHED)]


# -- saves -----------------------------------------------------------------------------------


def test_an_unanswered_store_fails_and_never_stops(rig):
    save = SaveOp(OperationId("s", 1, OpKind.SAVE), tuple(range(32)), 0, 32, (0, 1))
    ok = SaveOp(OperationId("s", 2, OpKind.SAVE), tuple(range(32)), 0, 32, (0, 1))
    rig.worker.start_save([save, ok])
    rig.tier.answer(ok.op)
    rig.at(1.0)
    assert rig.poll() == [Completion(ok.op, Outcome.FINISHED, "")]
    rig.at(31.5)
    assert rig.poll() == [Completion(save.op, Outcome.FAILED, "store not answered")]
    assert not rig.worker.has_pending()


# -- on the simulated tier and copy engine ------------------------------------------------


def test_restore_lands_the_stored_pages_and_state():
    clock = VirtualClock()
    geo = Geometry(16, 32, 64, 64)
    tier = MemoryTier(clock, geo)
    kv = SimKvPages(16)
    trace = Trace(clock.now)
    channel = QueueChannel()
    worker = RestoreWorker(clock, tier, SimCopyEngine(clock, kv), kv, channel, trace)
    ids = tuple(range(40, 104))
    for b, page in enumerate((101, 102, 103, 104)):
        kv.write(b, page)
    kv.write_state("src", 555)
    save = SaveOp(OperationId("src", 1, OpKind.SAVE), ids, 0, 64, (0, 1, 2, 3), ((32, 9),))
    worker.start_save([save])
    clock.sleep(1.0)
    assert worker.get_finished() == [Completion(save.op, Outcome.FINISHED, "")]
    load = LoadOp(OperationId("dst", 2), ids[:64], 64, 32, (8, 9, 10, 11), state_key=9)
    worker.start_load([load])
    for _ in range(5):
        clock.sleep(1.0)
        out = worker.get_finished()
        if out:
            break
    assert out == [Completion(load.op, Outcome.FINISHED)]
    assert [kv.read(b) for b in (8, 9, 10, 11)] == [101, 102, 103, 104]
    assert kv.read_state("dst") == 555


def test_page_digest_names_simulated_pages_and_not_tensors():
    from kvfault.reference.stack.worker import page_digest

    assert page_digest([3, 1, 2]) == hash((3, 1, 2)) != page_digest([1, 2, 3])
    assert page_digest([]) == hash(())
    assert page_digest([object(), object()]) is None  # tensors hash by identity


def test_pending_counts_each_unanswered_retrieve_once(rig):
    assert rig.worker.pending() == {"loads": 0, "saves": 0, "tier_tickets": 0}
    loads = rig.loads(3)
    rig.worker.start_load(loads)
    assert rig.worker.pending() == {"loads": 3, "saves": 0, "tier_tickets": 3}
    rig.tier.answer(loads[0].op)
    rig.poll()  # the first reply is seen (its copy is enqueued)
    assert rig.worker.pending() == {"loads": 3, "saves": 0, "tier_tickets": 2}


def test_a_refused_store_reports_the_tiers_reason(rig):
    save = SaveOp(OperationId("s", 1, OpKind.SAVE), tuple(range(32)), 0, 32, (0, 1))
    rig.worker.start_save([save])
    rig.tier.answer(save.op, ok=False)
    assert rig.poll() == [Completion(save.op, Outcome.FAILED, "tier: boom")]


def test_a_later_retrieve_is_seen_while_an_earlier_one_is_copying(rig):
    first, second = rig.loads(2)
    rig.worker.start_load([first, second])
    rig.tier.answer(first.op)
    rig.poll()  # first retrieved, its copy in flight
    rig.tier.answer(second.op)
    rig.poll()
    assert [e.op for e in rig.trace.of(Ev.RETRIEVE_TERMINAL)] == [first.op, second.op]


def test_the_trace_names_a_fence_error_and_what_a_finished_copy_landed(rig):
    (load,) = rig.loads(1)
    rig.copy.fence.add(load.op)
    rig.worker.start_load([load])
    rig.tier.answer(load.op, pages=(7, 8))
    rig.poll()
    (fence,) = rig.trace.of(Ev.COPY_FENCE_ERROR)
    assert fence.data == {"error": f"fence raised for {load.op}"}
    rig.copy.fence.clear()
    rig.poll()  # retried
    rig.copy.done.add(load.op)
    rig.poll()
    (done,) = rig.trace.of(Ev.COPY_COMPLETE)
    assert done.data["pages"] == 2 and done.data["digest"] == hash((7, 8))


def test_the_channel_records_each_completion_that_reaches_the_inbox():
    trace = Trace(VirtualClock().now)
    channel = QueueChannel(trace)
    op = OperationId("r", 1)
    channel.put([Completion(op, Outcome.FAILED, "x")])
    (ev,) = trace.of(Ev.DELIVERED)
    assert ev.op == op and ev.data == {"outcome": "failed"}
    assert channel.take() == [Completion(op, Outcome.FAILED, "x")] and channel.take() == []


def test_a_later_failed_retrieve_is_reported_while_an_earlier_one_is_pending(rig):
    first, second = rig.loads(2)
    rig.worker.start_load([first, second])
    rig.tier.answer(second.op, ok=False)
    assert rig.poll() == [Completion(second.op, Outcome.FAILED, "tier: boom")]
    assert rig.worker.pending() == {"loads": 1, "saves": 0, "tier_tickets": 1}
