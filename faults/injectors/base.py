"""Fault injectors: each wraps one collaborator of the reference stack. Their base,
``Injector``, is in ``kvfault.faults.runs`` beside the run it rewrites (a run's context
and result hold injectors, and an injector rewrites a context: one module, no circle);
here are their triggers and the functions that apply a run's injectors.

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
from typing import Any, Callable, Sequence

from kvfault.faults.runs import Injector, RunContext


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
