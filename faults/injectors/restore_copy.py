"""Faults of the restore copy engine: a fence that fails once or keeps failing."""

from __future__ import annotations

from typing import Any, Sequence

from kvfault.faults.injectors.base import Trigger
from kvfault.faults.runs import Injector
from kvfault.reference.errors import RestoreFenceError
from kvfault.reference.interfaces import (
    CopyEngine,
    Page,
    State,
)
from kvfault.reference.types import OperationId


class FenceFailure(Injector):
    """The restore fence raises ``RestoreFenceError`` when the copy of a chosen load is
    enqueued (the ``nth`` load whose copy the worker enqueues, or each with probability
    ``p``). Transient: it raises once and the worker retries at a later poll, keeping
    the submission clock. ``persistent``: it raises at every attempt, so the transfer
    deadline stops the engine."""

    name = "fence_failure"

    def __init__(
        self,
        nth: Sequence[int] = (),
        *,
        p: float = 0.0,
        persistent: bool = False,
        seed: int = 0,
        name: str | None = None,
    ):
        if name is not None:
            self.name = name  # a catalog alias (fence_failure_persistent)
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.persistent = persistent
        self.raised = 0
        self._count = 0

    def wrap_copy(self, copy: CopyEngine) -> CopyEngine:
        injector = self
        # Per engine build: a restart starts a fresh scheduler whose op ids can recur.
        attempts: dict[OperationId, int] = {}
        chosen: set[OperationId] = set()

        class _Copy:
            def enqueue(
                self,
                op: OperationId,
                pages: Sequence[Page],
                blocks: Sequence[int],
                state: State | None,
                req_id: str,
            ) -> object:
                if op not in attempts:
                    injector._count += 1
                    if injector.trigger.hits(injector._count, injector.rng):
                        chosen.add(op)
                attempts[op] = attempts.get(op, 0) + 1
                if op in chosen and (injector.persistent or attempts[op] == 1):
                    injector.raised += 1
                    if attempts[op] == 1:
                        # One firing per broken load: a persistent fence raises at
                        # every poll, which ``raised`` counts without flooding the trace.
                        injector.fire(op=op, persistent=injector.persistent)
                    raise RestoreFenceError(f"injected fence failure at enqueue of {op}")
                return copy.enqueue(op, pages, blocks, state, req_id)

            def is_complete(self, ticket: object) -> bool:
                return copy.is_complete(ticket)

            def __getattr__(self, name: str) -> Any:
                return getattr(copy, name)

        return _Copy()

    def describe(self) -> str:
        kind = "persistent" if self.persistent else "transient"
        return f"{self.name}({self.trigger.describe()}, {kind})"
