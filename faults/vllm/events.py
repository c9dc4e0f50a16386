"""What a run's process records: kvfault trace events as plain dicts, stamped with the
host's monotonic clock, sent back to the campaign process as JSON."""

from __future__ import annotations

import time
from typing import Any


class EventLog:
    """The events one run records (``kvfault.reference.trace.Ev`` names and their data)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.step = -1

    def record(
        self, kind: str, op: tuple[str, int, str] | None = None, req_id: str | None = None,
        **data: Any,
    ) -> None:  # fmt: skip
        if req_id is None and op is not None:
            req_id = op[0]
        self.events.append(
            {"t": time.monotonic(), "step": self.step, "kind": kind,
             "op": list(op) if op else None, "req_id": req_id, "data": data}
        )  # fmt: skip
