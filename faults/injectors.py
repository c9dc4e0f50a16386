"""Fault injectors: each wraps one collaborator of the reference stack.

An injector never changes ``reference/``; it is handed each collaborator as an engine
is assembled (``wrap``) and returns it or a wrapper around it. Every time it actually
injects, it records a ``fault`` trace event, so a run can tell which faults fired.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from reference.interfaces import CompletionChannel, ForwardTimer
from reference.trace import Ev, Trace
from reference.types import Completion, OperationId, OpKind, Outcome


class Injector:
    """Base: wraps nothing. Subclasses override ``wrap_<role>`` for their role."""

    name: ClassVar[str] = "injector"

    def __init__(self) -> None:
        self.fired = 0
        self._trace: Trace | None = None

    def bind(self, trace: Trace) -> None:
        self._trace = trace

    def fire(self, op: OperationId | None = None, **evidence: Any) -> None:
        self.fired += 1
        if self._trace is not None:
            self._trace.record(Ev.FAULT, op=op, injector=self.name, **evidence)

    def wrap(self, role: str, part: Any) -> Any:
        method = getattr(self, f"wrap_{role}", None)
        return method(part) if method else part

    def describe(self) -> str:
        return self.name


class SlowForward(Injector):
    """Chosen forwards take long: ``durations`` maps a forward index (0 = the first
    forward after an engine start, which compiles kernels) to its seconds."""

    name = "slow_forward"

    def __init__(self, durations: dict[int, float]):
        super().__init__()
        if any(d < 0 for d in durations.values()):
            raise ValueError("slow_forward durations must be >= 0")
        self.durations = dict(durations)

    def wrap_timer(self, timer: ForwardTimer) -> ForwardTimer:
        injector = self

        class _Timer:
            def duration(self, forward_index: int, num_tokens: int) -> float:
                if forward_index in injector.durations:
                    seconds = injector.durations[forward_index]
                    injector.fire(forward=forward_index, seconds=seconds)
                    return seconds
                return timer.duration(forward_index, num_tokens)

        return _Timer()


class LostCompletion(Injector):
    """The worker-to-scheduler completion of chosen loads never arrives: the
    ``nth`` finished load reports (1-based, counted over the run) are dropped."""

    name = "lost_completion"

    def __init__(self, nth: Sequence[int]):
        super().__init__()
        if not nth or any(n < 1 for n in nth):
            raise ValueError("lost_completion needs 1-based load indexes")
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
                        if injector._seen in injector.nth:
                            injector.fire(op=c.op, direction="worker->scheduler")
                            continue
                    kept.append(c)
                channel.put(kept)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()


def wrap_all(injectors: Sequence[Injector]):
    """A ``wrap`` for ``SimWorld.engine`` applying every injector in order."""

    def wrap(role: str, part: Any) -> Any:
        for inj in injectors:
            part = inj.wrap(role, part)
        return part

    return wrap
