"""Fault injectors: each wraps one collaborator of the reference stack.

An injector never changes ``reference/``; it is handed each collaborator as an engine
is assembled (``wrap(role, part)``, roles ``timer``, ``tier``, ``channel``, ``copy``)
and returns it or a wrapper around it. Two further hooks cover faults that are not a
collaborator's behaviour: ``configure`` rewrites a run's startup settings (port-0 ids)
and ``request_map`` rewrites request ids before they enter the stack (hash-order
shuffle).

Triggers are data: ``nth`` (1-based counts of the injector's operation over the whole
run) and ``p`` (a probability per operation, drawn from ``random.Random`` seeded with
the run's seed and the injector's name, never from global randomness). Every time an
injector actually injects, it calls ``fire``: the count feeds the run's fired report
and a ``fault`` trace event carries the evidence.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import OperationId, Request

if TYPE_CHECKING:  # scenarios import this module; the hooks only need the type
    from kvfault.faults.runs import RunContext


@dataclass(frozen=True)
class Trigger:
    """Which operations a fault hits: the ``nth`` ones (1-based, counted over the run)
    and each other one with probability ``p`` (drawn from the injector's seeded rng)."""

    nth: tuple[int, ...] = ()
    p: float = 0.0

    def __post_init__(self) -> None:
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.nth):
            raise ValueError(f"trigger nth must be 1-based counts, got {list(self.nth)}")
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"trigger p must lie in [0, 1], got {self.p}")

    def hits(self, count: int, rng: random.Random) -> bool:
        # Draw only when a probability is set, so an nth-only trigger consumes no
        # randomness and adding one never shifts another injector's draws.
        drawn = self.p > 0.0 and rng.random() < self.p
        return count in self.nth or drawn

    def describe(self) -> str:
        parts = [f"nth={list(self.nth)}"] if self.nth else []
        if self.p:
            parts.append(f"p={self.p:g}")
        return ", ".join(parts) or "never"


class Injector:
    """Base: wraps nothing. Subclasses override ``wrap_<role>`` for their role.

    ``seed`` is the run's seed; ``rng`` is this injector's own stream drawn from it.
    ``spec`` is set when a fault plan built the injector (a scenario's own faults have
    none), so a report can tell planned faults from the workload's.
    """

    name: str = "injector"  # per class; an instance may carry a catalog alias

    def __init__(self, seed: int = 0) -> None:
        self.fired = 0
        self.seed = seed
        # A str seed is hashed with sha512: the stream does not depend on PYTHONHASHSEED.
        self.rng = random.Random(f"{self.name}/{seed}")
        self.spec: Any = None
        self._trace: Trace | None = None
        self._unbound: list[tuple[OperationId | None, dict[str, Any]]] = []

    def bind(self, trace: Trace) -> None:
        """Attach the run's trace; evidence fired before (``configure``) is recorded now."""
        self._trace = trace
        pending, self._unbound = self._unbound, []
        for op, evidence in pending:
            trace.record(Ev.FAULT, op=op, injector=self.name, **evidence)

    def fire(self, op: OperationId | None = None, **evidence: Any) -> None:
        """Count one injection and record its evidence as a ``fault`` trace event."""
        self.fired += 1
        if self._trace is None:
            self._unbound.append((op, evidence))
        else:
            self._trace.record(Ev.FAULT, op=op, injector=self.name, **evidence)

    def wrap(self, role: str, part: Any) -> Any:
        method = getattr(self, f"wrap_{role}", None)
        return method(part) if method else part

    def configure(self, ctx: RunContext) -> RunContext:
        """A configuration fault returns a changed copy of the run's context."""
        return ctx

    def request_map(self) -> Callable[[Request], Request] | None:
        """A map applied to every request before it enters the stack, or None."""
        return None

    def replay_map(self) -> Callable[[Request], Request] | None:
        """The map of the determinism re-run (default: the same as ``request_map``)."""
        return self.request_map()

    def describe(self) -> str:
        return self.name


def wrap_all(injectors: Sequence[Injector]) -> Callable[[str, Any], Any]:
    """A ``wrap`` for ``SimWorld.engine`` applying every injector in order."""

    def wrap(role: str, part: Any) -> Any:
        for inj in injectors:
            part = inj.wrap(role, part)
        return part

    return wrap


def configure_all(injectors: Sequence[Injector], ctx: RunContext) -> RunContext:
    """Apply every injector's configuration fault to a run's context, in order."""
    for inj in injectors:
        ctx = inj.configure(ctx)
    return ctx
