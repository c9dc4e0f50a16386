"""Faults of the completion channel (worker -> scheduler): a load or save completion
lost, delivered twice, or delivered late (after an engine restart)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from reference.interfaces import (
    CompletionChannel,
)
from reference.types import Completion, OpKind, Outcome

if TYPE_CHECKING:  # scenarios import this module; the hooks only need the type
    pass
from faults.injectors.base import Injector, Trigger


class LostCompletion(Injector):
    """The worker-to-scheduler completion of chosen loads never arrives: the ``nth``
    finished load reports (1-based, counted over the run) are dropped, and each other
    one with probability ``p``."""

    name = "lost_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.nth = set(nth)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                kept = []
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, direction="worker->scheduler")
                            continue
                    kept.append(c)
                channel.put(kept)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LostSaveCompletion(Injector):
    """The worker-to-scheduler completion of chosen saves never arrives: the ``nth``
    save reports (1-based, over the run, finished or failed) are dropped, and each
    other one with probability ``p``. A store is best effort: the stack must neither
    wait for it nor stop."""

    name = "lost_save_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                kept = []
                for c in completions:
                    if c.op.kind is OpKind.SAVE:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, direction="worker->scheduler")
                            continue
                    kept.append(c)
                channel.put(kept)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class DuplicateCompletion(Injector):
    """Chosen finished load completions reach the scheduler twice (a retried send):
    the ``nth`` finished load reports (1-based, over the run), and each other one with
    probability ``p``. The scheduler must apply the first and treat the copy as stale."""

    name = "duplicate_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                out = list(completions)
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, copies=2)
                            out.append(c)
                channel.put(out)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LateCompletion(Injector):
    """Chosen finished load completions are held back and reach the scheduler only
    after the engine restarted: with the first completions the worker of the next
    engine build reports, when that scheduler may already have dispatched its own
    loads (a message from the dead process still in the socket). The ``nth`` finished
    load reports (1-based, over the run) are held, and each other one with
    probability ``p``. The new scheduler must not mistake it for one of its own."""

    name = "late_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0
        self._held: list[Completion] = []

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self
        # Called once per engine build: what was held under an earlier build is late now.
        late, injector._held = injector._held, []

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                out = []
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector._held.append(c)
                            continue
                    out.append(c)
                if late:
                    for c in late:
                        injector.fire(op=c.op, delivered="after restart")
                    out = [*late, *out]
                    late.clear()
                channel.put(out)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


# -- tier (tier <-> worker) ------------------------------------------------------------
