"""Faults of the completion channel (worker -> scheduler): a load or save completion
lost, delivered twice, or delivered late (after an engine restart)."""

from __future__ import annotations

from typing import Callable, Sequence

from kvfault.faults.injectors.base import Trigger
from kvfault.faults.runs import Injector
from kvfault.reference.interfaces import CompletionChannel
from kvfault.reference.types import Completion, OpKind, Outcome


class _ChannelFault(Injector):
    """Shared plumbing of the channel faults: the trigger counts the completions the
    fault may hit (``counts``: finished loads unless a subclass says otherwise) and
    ``hit`` says whether this one is chosen; ``_channel`` wraps a channel's ``put``."""

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0

    def counts(self, c: Completion) -> bool:
        return c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED

    def hit(self, c: Completion) -> bool:
        if not self.counts(c):
            return False
        self._seen += 1
        return self.trigger.hits(self._seen, self.rng)

    @staticmethod
    def _channel(
        channel: CompletionChannel, put: Callable[[Sequence[Completion]], list[Completion]]
    ) -> CompletionChannel:
        """``channel`` whose puts go through ``put`` first; takes are the channel's."""

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                channel.put(put(completions))

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LostCompletion(_ChannelFault):
    """The worker-to-scheduler completion of chosen loads never arrives: the ``nth``
    finished load reports (1-based, counted over the run) are dropped, and each other
    one with probability ``p``."""

    name = "lost_completion"

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        def put(completions: Sequence[Completion]) -> list[Completion]:
            kept = []
            for c in completions:
                if self.hit(c):
                    self.fire(op=c.op, direction="worker->scheduler")
                else:
                    kept.append(c)
            return kept

        return self._channel(channel, put)


class LostSaveCompletion(LostCompletion):
    """The worker-to-scheduler completion of chosen saves never arrives: the ``nth``
    save reports (1-based, over the run, finished or failed) are dropped, and each
    other one with probability ``p``. A store is best effort: the stack must neither
    wait for it nor stop."""

    name = "lost_save_completion"

    def counts(self, c: Completion) -> bool:
        return c.op.kind is OpKind.SAVE


class DuplicateCompletion(_ChannelFault):
    """Chosen finished load completions reach the scheduler twice (a retried send):
    the ``nth`` finished load reports (1-based, over the run), and each other one with
    probability ``p``. The scheduler must apply the first and treat the copy as stale."""

    name = "duplicate_completion"

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        def put(completions: Sequence[Completion]) -> list[Completion]:
            copies = []
            for c in completions:
                if self.hit(c):
                    self.fire(op=c.op, copies=2)
                    copies.append(c)
            return [*completions, *copies]  # the copy comes after the whole batch

        return self._channel(channel, put)


class LateCompletion(_ChannelFault):
    """Chosen finished load completions are held back and reach the scheduler only
    after the engine restarted: with the first completions the worker of the next
    engine build reports, when that scheduler may already have dispatched its own
    loads (a message from the dead process still in the socket). The ``nth`` finished
    load reports (1-based, over the run) are held, and each other one with
    probability ``p``. The new scheduler must not mistake it for one of its own."""

    name = "late_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(nth, p=p, seed=seed)
        self._held: list[Completion] = []

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        # Called once per engine build: what was held under an earlier build is late now.
        late, self._held = self._held, []

        def put(completions: Sequence[Completion]) -> list[Completion]:
            out = []
            for c in completions:
                if self.hit(c):
                    self._held.append(c)
                else:
                    out.append(c)
            if late:
                for c in late:
                    self.fire(op=c.op, delivered="after restart")
                out = [*late, *out]
                late.clear()
            return out

        return self._channel(channel, put)
