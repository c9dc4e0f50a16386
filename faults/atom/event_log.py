"""What a server process records: trace events stamped with the host's monotonic clock
(``EventLog``), the trace operation id of an ATOM completion id (``op_of``) and where
an ATOM connector output carries completions (``completion_fields``). Both
server processes (``kvfault.faults.atom.worker``, ``kvfault.faults.atom.scheduler``) record through it;
the host merges what they send back (``kvfault.faults.atom.runs``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kvfault.faults.atom.spec import RawEvent


class EventLog:
    """The events one process records, stamped with the host's monotonic clock."""

    def __init__(self) -> None:
        self.events: list[RawEvent] = []
        self.step = -1
        # Data every event of this process carries (a TP worker's ``rank`` past 0).
        self.tags: dict[str, Any] = {}
        # ATOM's save and load threads record too (a slowed store or retrieve).
        self._lock = threading.Lock()

    def record(self, kind: str, op: Any = None, req_id: str | None = None, **data: Any) -> None:
        if req_id is None and op is not None:
            req_id = op[0]
        with self._lock:
            data = {**data, **self.tags} if self.tags else data
            self.events.append(RawEvent(time.monotonic(), self.step, kind, op, req_id, data))

    def take(self) -> list[RawEvent]:
        with self._lock:
            out, self.events = self.events, []
        return out


def op_of(value: Any, kind: str, names: dict[Any, str]) -> tuple[str, int, str]:
    """A trace operation id for an ATOM completion id: an exact ``Load/SaveOperationId``
    keeps its generation; a bare request id (older ATOM) gets generation 0."""
    req = getattr(value, "req_id", value)
    gen = int(getattr(value, "generation", 0))
    return (names.get(req, str(req)), gen, kind)


def completion_fields(out: Any) -> tuple[tuple[str, str, str], ...]:
    """Where an ATOM connector output carries each kind of completion, as ``(field,
    kind, outcome)``. Loads are in ``finished_loading``/``failed_loading`` since ATOM's
    9bed95e; before it the offload connector reported them in the P/D receive fields,
    ``finished_recving``/``failed_recving`` (which an offload connector uses for
    nothing else)."""
    loads = "loading" if hasattr(out, "finished_loading") else "recving"
    return (
        (f"finished_{loads}", "load", "finished"),
        (f"failed_{loads}", "load", "failed"),
        ("finished_saving", "save", "finished"),
    )
