"""What a stop says (the named errors carry the operation, the time and the limit) and
what the trace records (time and step from its owner, shared events, a digest of its
JSON lines)."""

from __future__ import annotations

import hashlib
import json

import pytest

from kvfault.reference.errors import (
    EngineIdentityConflict,
    EngineStopped,
    LoadNotTerminal,
    TransferUnprovable,
)
from kvfault.reference.trace import Ev, Trace, TraceEvent
from kvfault.reference.types import OperationId, OpKind

OP = OperationId("req-1", 4)


def test_transfer_unprovable_names_the_phase_and_the_deadline():
    err = TransferUnprovable(OP, 12.34567, "retrieve", 10.0)
    assert isinstance(err, EngineStopped)
    assert (err.op, err.elapsed, err.phase) == (OP, 12.34567, "retrieve")
    assert str(err) == (
        "load:req-1#4 retrieve is still not terminal after 12.346s (transfer deadline 10s)"
    )


def test_load_not_terminal_names_the_bound():
    err = LoadNotTerminal(OP, 40.5, 40.0)
    assert isinstance(err, EngineStopped)
    assert (err.op, err.elapsed) == (OP, 40.5)
    assert str(err) == "load:req-1#4 is still not terminal after 40.500s (load bound 40s)"


def test_identity_conflict_names_the_socket_and_the_engine():
    err = EngineIdentityConflict("/tmp/x.sock", "engine-dp0")
    assert (err.path, err.engine_id) == ("/tmp/x.sock", "engine-dp0")
    assert str(err) == (
        "lookup socket /tmp/x.sock is already served by a live server; engine id "
        "'engine-dp0' would share it (is data_parallel_base_port unresolved?)"
    )


class _Clock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t


def test_record_takes_time_and_step_from_the_owner_and_the_request_from_the_op():
    clock, steps = _Clock(), iter(range(5, 100))
    trace = Trace(clock.now, lambda: next(steps))
    clock.t = 1.5
    ev = trace.record(Ev.DISPATCH, op=OP, claim=256)
    assert ev == TraceEvent(1.5, 5, Ev.DISPATCH, OP, "req-1", {"claim": 256})
    own = trace.record(Ev.OUTPUT, op=OP, req_id="other")
    assert own.req_id == "other" and own.step == 6
    bare = trace.record(Ev.RESTART)
    assert bare.op is None and bare.req_id is None and bare.data == {}
    assert trace.events == [ev, own, bare]


def test_a_trace_without_a_step_counter_records_step_minus_one():
    assert Trace(_Clock().now).record(Ev.BIND).step == -1


def test_children_share_the_events_and_keep_their_own_steps():
    clock = _Clock()
    root = Trace(clock.now)
    a, b = root.child(lambda: 1), root.child(lambda: 2)
    a.record(Ev.BIND, req_id="x")
    b.record(Ev.BIND, req_id="y")
    assert root.events is a.events is b.events
    assert [(e.step, e.req_id) for e in root.events] == [(1, "x"), (2, "y")]


def test_of_selects_the_kinds_asked_for_in_order():
    trace = Trace(_Clock().now)
    for kind in (Ev.SAVE, Ev.LOOKUP, Ev.SAVE_DONE, Ev.SAVE):
        trace.record(kind)
    assert [e.kind for e in trace.of(Ev.SAVE)] == [Ev.SAVE, Ev.SAVE]
    assert [e.kind for e in trace.of(Ev.SAVE_DONE, Ev.LOOKUP)] == [Ev.LOOKUP, Ev.SAVE_DONE]
    assert list(trace.of(Ev.STOP)) == []


def test_an_event_as_json_rounds_time_and_names_the_op():
    ev = TraceEvent(0.1234567891234, 3, Ev.SAVE, OperationId("r", 2, OpKind.SAVE), "r", {"n": 1})
    assert ev.as_json() == {
        "t": 0.123456789,
        "step": 3,
        "kind": "save",
        "op": "save:r#2",
        "req_id": "r",
        "data": {"n": 1},
    }
    assert TraceEvent(0.0, 0, Ev.BIND).as_json()["op"] is None


def _trace(*claims):
    clock = _Clock()
    trace = Trace(clock.now)
    for i, claim in enumerate(claims):
        clock.t = float(i)
        trace.record(Ev.LOOKUP, req_id=f"r{i}", claim=claim)
    return trace


def test_the_digest_is_the_sha256_of_the_json_lines():
    trace = _trace(0, 256)
    lines = trace.to_jsonl().split("\n")
    assert [json.loads(line)["data"] for line in lines] == [{"claim": 0}, {"claim": 256}]
    assert trace.digest() == hashlib.sha256((trace.to_jsonl() + "\n").encode()).hexdigest()


@pytest.mark.parametrize("other", [(0, 512), (256, 0), (0,), (0, 256, 0)])
def test_the_digest_tells_traces_apart(other):
    assert _trace(0, 256).digest() == _trace(0, 256).digest()
    assert _trace(0, 256).digest() != _trace(*other).digest()


def test_an_empty_trace_has_the_digest_of_nothing():
    assert _trace().digest() == hashlib.sha256().hexdigest()
    assert _trace().to_jsonl() == ""


def test_values_json_cannot_hold_are_written_as_text():
    trace = Trace(_Clock().now)
    trace.record(Ev.FAULT, where=OP, raw=b"x")
    (line,) = trace.to_jsonl().split("\n")
    assert json.loads(line)["data"] == {"where": "load:req-1#4", "raw": "b'x'"}
    assert trace.digest() == hashlib.sha256((line + "\n").encode()).hexdigest()
