"""The scheduler's load bounds (fix 6 of the seed).

The scheduler stops the engine when a load is not terminal ``bound_s`` after it first
sees it. When a load finishes, every active load dispatched after it starts its bound
again; a load is restarted only by loads dispatched before it, so a load whose
completion is lost still stops the engine one bound after the last of those finishes.
"""

from __future__ import annotations

from reference.types import OperationId


class LoadBounds:
    """Active loads in dispatch order (an insertion-ordered dict) with bound starts."""

    def __init__(self, bound_s: float):
        if bound_s <= 0:
            raise ValueError(f"load bound must be positive, got {bound_s}")
        self.bound_s = bound_s
        self._active: dict[OperationId, float] = {}

    def dispatched(self, op: OperationId, now: float) -> None:
        self._active[op] = now

    def is_active(self, op: OperationId) -> bool:
        return op in self._active

    def terminal(self, op: OperationId, now: float, finished: bool) -> list[OperationId]:
        """Retire ``op``; on a finish, restart the loads dispatched after it. Returns the
        restarted loads."""
        if op not in self._active:
            return []
        behind = self.dispatched_after(op) if finished else []
        del self._active[op]
        for later in behind:
            self._active[later] = now
        return behind

    def dispatched_after(self, op: OperationId) -> list[OperationId]:
        order = list(self._active)
        return order[order.index(op) + 1 :]

    def overdue(self, now: float) -> tuple[OperationId, float] | None:
        """The first load, in dispatch order, past its bound, with its elapsed time."""
        for op, start in self._active.items():
            if now - start > self.bound_s:
                return op, now - start
        return None

    def next_expiry(self) -> float | None:
        """When the earliest bound runs out (None with no active load)."""
        if not self._active:
            return None
        return min(self._active.values()) + self.bound_s

    def __len__(self) -> int:
        return len(self._active)
