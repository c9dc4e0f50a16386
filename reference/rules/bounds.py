"""The scheduler's load bounds (fix 6 of the seed).

The scheduler stops the engine when a load is not terminal ``bound_s`` after it first
sees it. When a load finishes, every active load dispatched after it starts its bound
again; a load is restarted only by loads dispatched before it, so a load whose
completion is lost still stops the engine one bound after the last of those finishes.
"""

from __future__ import annotations

import heapq

from kvfault.reference.types import OperationId


class LoadBounds:
    """Active loads in dispatch order with bound starts.

    ``dispatched_after`` says which loads a finish restarts (a legacy variant replaces
    it). How the starts are kept is this class's business: while times only grow and
    every restart is of all the loads dispatched after the finished one (this rule),
    the starts never fall in dispatch order, so the first active load has the earliest,
    and a restart is recorded once for its whole suffix instead of once per load. Any
    other restart, or a time that goes back, writes every start out and keeps them one
    by one from then on.
    """

    def __init__(self, bound_s: float):
        if bound_s <= 0:
            raise ValueError(f"load bound must be positive, got {bound_s}")
        self.bound_s = bound_s
        # Active load -> its slot; dict order is dispatch order.
        self._active: dict[OperationId, int] = {}
        # Per slot (one per dispatch): the start written for it, and its load (None
        # once terminal).
        self._starts: list[float] = []
        self._ops: list[OperationId | None] = []
        self._first = 0  # no slot below this is active
        self._latest = float("-inf")  # the latest time seen
        self._suffix_starts = True
        # Suffix restarts not yet below the first active slot: (slot of the finished
        # load, time); each restarts the slots above it. Those below it are folded
        # into ``_restarted``, the latest such restart's time.
        self._pending: list[tuple[int, float]] = []
        self._restarted = float("-inf")

    def dispatched(self, op: OperationId, now: float) -> None:
        self._saw(now)
        self._active[op] = len(self._starts)
        self._starts.append(now)
        self._ops.append(op)

    def is_active(self, op: OperationId) -> bool:
        return op in self._active

    def terminal(self, op: OperationId, now: float, finished: bool) -> list[OperationId]:
        """Retire ``op``; on a finish, restart the loads dispatched after it. Returns the
        restarted loads."""
        if op not in self._active:
            return []
        suffix = False  # ``behind`` is every load dispatched after ``op``
        if not finished:
            behind = []
        elif type(self).dispatched_after is LoadBounds.dispatched_after:
            behind, suffix = self.dispatched_after(op), True  # this rule: the suffix
        else:
            behind = self.dispatched_after(op)
            if self._suffix_starts:
                order = list(self._active)
                suffix = behind == order[order.index(op) + 1 :]
        if behind:
            self._saw(now)
            if self._suffix_starts:
                if suffix:
                    heapq.heappush(self._pending, (self._active[op], now))
                else:
                    self._write_out()
            if not self._suffix_starts:
                starts, active = self._starts, self._active
                for later in behind:
                    starts[active[later]] = now
        slot = self._active.pop(op)
        self._ops[slot] = None
        if slot == self._first:
            self._advance()
        return behind

    def dispatched_after(self, op: OperationId) -> list[OperationId]:
        order = list(self._active)
        return order[order.index(op) + 1 :]

    def overdue(self, now: float) -> tuple[OperationId, float] | None:
        """The first load, in dispatch order, past its bound, with its elapsed time."""
        if self._suffix_starts:
            if not self._active:
                return None
            elapsed = now - self._start(self._first)
            op = self._ops[self._first]
            return (op, elapsed) if elapsed > self.bound_s and op is not None else None
        starts = self._starts
        for op, slot in self._active.items():
            if now - starts[slot] > self.bound_s:
                return op, now - starts[slot]
        return None

    def next_expiry(self) -> float | None:
        """When the earliest bound runs out (None with no active load)."""
        if not self._active:
            return None
        if self._suffix_starts:
            return self._start(self._first) + self.bound_s
        return min(self._starts[slot] for slot in self._active.values()) + self.bound_s

    def __len__(self) -> int:
        return len(self._active)

    # -- how the starts are kept -----------------------------------------------------
    def _start(self, slot: int) -> float:
        """A slot's start while restarts are kept per suffix (the slot at or above the
        first active one: every folded restart covers it)."""
        return max(self._starts[slot], self._restarted)

    def _advance(self) -> None:
        """Move past terminal slots; fold the restarts now below the first active slot."""
        ops, first = self._ops, self._first
        while first < len(ops) and ops[first] is None:
            first += 1
        self._first = first
        pending = self._pending
        while pending and pending[0][0] < first:
            self._restarted = max(self._restarted, heapq.heappop(pending)[1])

    def _saw(self, now: float) -> None:
        if now < self._latest and self._suffix_starts:
            self._write_out()  # a start could fall: keep each one from here on
        self._latest = max(self._latest, now)

    def _write_out(self) -> None:
        """Write every active slot's start, then keep them one by one."""
        marks = sorted(self._pending)
        latest, i = self._restarted, 0
        for slot in sorted(self._active.values()):
            while i < len(marks) and marks[i][0] < slot:
                latest = max(latest, marks[i][1])
                i += 1
            self._starts[slot] = max(self._starts[slot], latest)
        self._pending.clear()
        self._suffix_starts = False
