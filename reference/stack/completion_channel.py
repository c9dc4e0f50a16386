"""The completion channel from worker to scheduler (in-process queue)."""

from __future__ import annotations

from typing import Sequence

from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Completion


class QueueChannel:
    """Completions put during a step are taken by the scheduler at the next step.

    With a ``trace``, each completion that reaches the scheduler's inbox is recorded
    (``delivered``): a completion the worker reported but the inbox never got was lost
    on the way; one in the inbox is the scheduler's to apply at its next step."""

    def __init__(self, trace: Trace | None = None) -> None:
        self._pending: list[Completion] = []
        self._trace = trace

    def put(self, completions: Sequence[Completion]) -> None:
        self._pending.extend(completions)
        if self._trace is not None:
            for c in completions:
                self._trace.record(Ev.DELIVERED, op=c.op, outcome=c.outcome._value_)

    def take(self) -> list[Completion]:
        out, self._pending = self._pending, []
        return out
