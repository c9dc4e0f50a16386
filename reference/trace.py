"""Typed trace events and the recorder every component of a run writes to.

Checkers (``kvfault.faults.properties.checks``) read a trace; nothing in the stack reads it back.
A trace has a digest so two runs can be compared for determinism.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import Any, Callable, Iterator, NamedTuple

from kvfault.reference.types import OperationId


class Ev(str, enum.Enum):
    LOOKUP = "lookup"
    KEY = "key"
    DISPATCH = "dispatch"
    RETRIEVE_SUBMIT = "retrieve_submit"
    RETRIEVE_TERMINAL = "retrieve_terminal"
    COPY_ENQUEUE = "copy_enqueue"
    COPY_FENCE_ERROR = "copy_fence_error"
    COPY_COMPLETE = "copy_complete"
    FINISHED_REPORTED = "finished_reported"
    DELIVERED = "delivered"  # a completion reached the scheduler's inbox
    COMPLETION_APPLIED = "completion_applied"
    BOUND_RESTART = "bound_restart"
    STOP = "stop"
    FORWARD_START = "forward_start"
    FORWARD_END = "forward_end"
    SAVE = "save"
    SENT = "sent"  # what the worker sent the tier: a retrieve's or store's range and keys
    BLOCKS = "blocks"  # HBM blocks a request took (and how many were prefix-cache hits) or freed
    SAVE_DONE = "save_done"
    ANCHOR = "anchor"
    STATE_SAVE = "state_save"
    # A request's state at a boundary that the tier took (a hybrid's SLOT sidecar): a
    # lookup marked ``sidecars`` resumes only at such a boundary.
    SIDECAR = "sidecar"
    BIND = "bind"
    UNBIND = "unbind"
    ARRIVE = "arrive"
    OUTPUT = "output"
    RESTART = "restart"
    QUIESCENT = "quiescent"  # an engine's run ended with nothing left: what it still holds
    FAULT = "fault"


class _EventFields(NamedTuple):
    t: float
    step: int
    kind: Ev
    op: OperationId | None
    req_id: str | None
    data: dict[str, Any]


class TraceEvent(_EventFields):
    """One recorded event: plain, immutable data (a tuple: a run records one per
    component action, so it must be cheap to make and to compare)."""

    __slots__ = ()

    def __new__(
        cls,
        t: float,
        step: int,
        kind: Ev,
        op: OperationId | None = None,
        req_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> TraceEvent:
        return tuple.__new__(cls, (t, step, kind, op, req_id, {} if data is None else data))

    def as_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 9),
            "step": self.step,
            "kind": self.kind.value,
            "op": str(self.op) if self.op else None,
            "req_id": self.req_id,
            "data": self.data,
        }


_new_event = tuple.__new__


class Trace:
    """Append-only list of events; time and step come from the owner's callbacks.

    Several engines on one host write to one event list through their own ``child``
    views, so each event carries the step of the engine that recorded it.
    """

    def __init__(
        self,
        now: Callable[[], float],
        step: Callable[[], int] | None = None,
        events: list[TraceEvent] | None = None,
    ):
        self._now = now
        self._step = step or (lambda: -1)
        self.events: list[TraceEvent] = [] if events is None else events

    def child(self, step: Callable[[], int]) -> Trace:
        """A view appending to the same events with its own step counter."""
        return Trace(self._now, step, self.events)

    def record(
        self,
        kind: Ev,
        op: OperationId | None = None,
        req_id: str | None = None,
        **data: Any,
    ) -> TraceEvent:
        if req_id is None and op is not None:
            req_id = op.req_id
        ev = _new_event(TraceEvent, (self._now(), self._step(), kind, op, req_id, data))
        self.events.append(ev)
        return ev

    def of(self, *kinds: Ev) -> Iterator[TraceEvent]:
        return (e for e in self.events if e.kind in kinds)

    def digest(self) -> str:
        h = hashlib.sha256()
        for ev in self.events:
            h.update(_encode(ev.as_json()).encode())
            h.update(b"\n")
        return h.hexdigest()

    def to_jsonl(self) -> str:
        return "\n".join(_encode(e.as_json()) for e in self.events)


# What ``json.dumps(obj, sort_keys=True, default=str)`` writes, with one encoder for
# every event (``dumps`` with options builds a new encoder per call).
_encode = json.JSONEncoder(sort_keys=True, default=str).encode
