"""Faults of the engine's own life: slow forwards (a first forward compiling, steps
under load) and engine crashes with a restart that keeps the tier."""

from __future__ import annotations

from typing import Sequence

from kvfault.faults.injectors.base import Trigger
from kvfault.faults.runs import Injector
from kvfault.reference.interfaces import (
    ForwardTimer,
)


class SlowForward(Injector):
    """Chosen forwards take long: ``durations`` maps a forward index (0 = the first
    forward after an engine start, which compiles kernels) to its seconds; with ``p``
    any other forward takes ``seconds`` with that probability (host load)."""

    name = "slow_forward"

    def __init__(
        self, durations: dict[int, float], *, p: float = 0.0, seconds: float = 21.0, seed: int = 0
    ):
        super().__init__(seed)
        if any(d < 0 for d in durations.values()) or seconds < 0:
            raise ValueError("slow_forward durations must be >= 0")
        self.durations = dict(durations)
        self.trigger = Trigger(p=p)
        self.seconds = seconds
        self._count = 0

    def wrap_timer(self, timer: ForwardTimer) -> ForwardTimer:
        injector = self

        class _Timer:
            def duration(self, forward_index: int, num_tokens: int) -> float:
                injector._count += 1
                if forward_index in injector.durations:
                    seconds = injector.durations[forward_index]
                elif injector.trigger.hits(injector._count, injector.rng):
                    seconds = injector.seconds
                else:
                    return timer.duration(forward_index, num_tokens)
                injector.fire(forward=forward_index, seconds=seconds)
                return seconds

        return _Timer()

    def describe(self) -> str:
        extra = f", {self.trigger.describe()} -> {self.seconds:g}s" if self.trigger.p else ""
        return f"{self.name}({self.durations}{extra})"


class EngineCrash(RuntimeError):
    """Raised by ``EngineRestart`` out of a forward: the engine process dies mid-step.
    A scenario that expects crashes restarts the engine with its tier kept."""


class EngineRestart(Injector):
    """The engine dies at chosen forwards (the ``nth`` forward of the run, 1-based, or
    each with probability ``p``), at most ``limit`` times; HBM, scheduler and worker
    state are gone while the tier keeps its data. The scenario restarts the engine and
    sends the unanswered requests again.

    A crash is an exception out of the step loop: only a scenario that restarts a dead
    engine arms the injector (``arm_crashes``); elsewhere it never fires, so a plan
    using it there is reported as not exercised rather than crashing the run."""

    name = "engine_restart"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, limit: int = 3, seed: int = 0):
        super().__init__(seed)
        if limit < 1:
            raise ValueError(f"engine_restart limit must be >= 1, got {limit}")
        self.trigger = Trigger(tuple(nth), p)
        self.limit = limit
        self.armed = False
        self._count = 0

    def wrap_timer(self, timer: ForwardTimer) -> ForwardTimer:
        injector = self

        class _Timer:
            def duration(self, forward_index: int, num_tokens: int) -> float:
                if not injector.armed:
                    return timer.duration(forward_index, num_tokens)
                injector._count += 1
                if injector.fired < injector.limit and injector.trigger.hits(
                    injector._count, injector.rng
                ):
                    injector.fire(forward=injector._count, tokens=num_tokens)
                    raise EngineCrash(f"injected crash at forward {injector._count} of the run")
                return timer.duration(forward_index, num_tokens)

        return _Timer()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, limit={self.limit})"


def arm_crashes(injectors: Sequence[Injector]) -> None:
    """A scenario that restarts a dead engine (catching ``EngineCrash``) arms the
    crash faults of its run."""
    for inj in injectors:
        if isinstance(inj, EngineRestart):
            inj.armed = True
