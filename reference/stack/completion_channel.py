"""The completion channel from worker to scheduler (in-process queue)."""

from __future__ import annotations

from typing import Sequence

from reference.types import Completion


class QueueChannel:
    """Completions put during a step are taken by the scheduler at the next step."""

    def __init__(self) -> None:
        self._pending: list[Completion] = []

    def put(self, completions: Sequence[Completion]) -> None:
        self._pending.extend(completions)

    def take(self) -> list[Completion]:
        out, self._pending = self._pending, []
        return out
