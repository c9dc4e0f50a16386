"""The vocabulary of one run: what a run is made from (``RunContext``), the base of the
faults it carries (``Injector``: each wraps collaborators and may rewrite the context),
and what it leaves for the judge (``RunResult``). Scenarios build runs from a context;
injectors rewrite a context; properties read a result."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from kvfault.fakes.clock import VirtualClock
from kvfault.fakes.model import DeterministicModel
from kvfault.fakes.sim import SimWorld
from kvfault.reference.errors import EngineStopped
from kvfault.reference.interfaces import Clock, Tier
from kvfault.reference.rules import Rules
from kvfault.reference.stack.engine import EngineConfig, EngineOutcome
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import OperationId, Request


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


@dataclass
class RunContext:
    """Everything one run of a scenario is made from; one seed drives the workload."""

    seed: int = 0
    rules: Rules = field(default_factory=Rules)
    injectors: list[Injector] = field(default_factory=list)
    # Wraps request ids before they enter the stack (the hash-order shuffle uses it).
    request_map: Callable[[Request], Request] = lambda r: r
    ports: tuple[int, int] = (35849, 34969)
    # The tier a run's engines use: the in-process tier by default; the real LMCache
    # tier passes its own (``reference.tiers.lmcache``) together with a real clock.
    tier_factory: Callable[[SimWorld, EngineConfig], Tier] | None = None
    clock_factory: Callable[[], Clock] = VirtualClock
    # Multiplies every duration a scenario sets (deadlines, bounds, slow forwards,
    # arrival gaps): real-time tiers run the same story faster, e.g. 0.05.
    time_scale: float = 1.0
    # Multiplies the scenario's size (``Scenario.scales``); 1 to ``argtypes.MAX_SCALE``.
    scale: int = 1

    def sized(self, n: int) -> int:
        """``n`` things (loads, prompts, arrivals) at this run's scale."""
        return n * self.scale

    def seconds(self, s: float) -> float:
        return s * self.time_scale


@dataclass
class RunResult:
    scenario: str
    seed: int
    trace: Trace
    config: EngineConfig
    requests: dict[str, Request]
    outcomes: list[EngineOutcome]
    injectors: list[Injector]
    notes: dict[str, object] = field(default_factory=dict)
    startup_error: str | None = None
    time_scale: float = 1.0  # the context's: a real-time tier runs the story faster

    @property
    def ending(self) -> Ending:
        return Ending.of(self)

    @property
    def model(self) -> DeterministicModel:
        return DeterministicModel(self.config.model_kind, self.config.geometry)

    @property
    def stop(self) -> EngineStopped | None:
        return next((o.stopped for o in self.outcomes if o.stopped), None)

    @property
    def stop_line(self) -> str | None:
        """The named error the run stopped or refused with, in one line: an engine's own
        stop, else the startup refusal, else the stop event a tier recorded itself (a
        real server whose process died names the exception there, with no engine stop
        to carry it). None for a run that stopped on nothing."""
        if self.stop is not None:
            return f"{type(self.stop).__name__}: {self.stop}"
        if self.startup_error is not None:
            return self.startup_error
        from kvfault.reference.trace import Ev

        ev = next(iter(self.trace.of(Ev.STOP)), None)
        if ev is None:
            return None
        error, message = ev.data.get("error"), ev.data.get("message")
        return f"{error}: {message}" if message else str(error or "stop")

    @property
    def hung(self) -> bool:
        return any(o.hung for o in self.outcomes)

    @property
    def sim_seconds(self) -> float:
        return self.trace.events[-1].t if self.trace.events else 0.0


# -- how a run ended, and how it must -------------------------------------------------

FINISH, STOP, REFUSE, HANG = "finish", "stop", "refuse", "hang"


@dataclass(frozen=True)
class Ending:
    """How a run ended: ``finish`` (ran to the end), ``stop`` (an engine stopped itself
    with ``error`` naming an operation of kind ``op`` after ``elapsed`` scenario seconds
    on the error's own clock), ``refuse`` (refused to start with ``error``) or ``hang``
    (neither finished nor stopped within its limit)."""

    kind: str
    error: str | None = None
    op: str | None = None
    elapsed: float | None = None

    @classmethod
    def of(cls, run: RunResult) -> Ending:
        from kvfault.reference.trace import Ev

        stop = next(iter(run.trace.of(Ev.STOP)), None)
        if run.startup_error is not None:
            return cls(REFUSE, stop.data.get("error") if stop is not None else None)
        if stop is not None:
            elapsed = stop.data.get("elapsed")
            return cls(
                STOP,
                stop.data.get("error"),
                stop.op.kind.value if stop.op is not None else None,
                None if elapsed is None else elapsed / run.time_scale,
            )
        return cls(HANG) if run.hung else cls(FINISH)

    def __str__(self) -> str:
        if self.kind == STOP:
            on = f" on a {self.op}" if self.op else " naming no operation"
            after = f" after {self.elapsed:.1f}s" if self.elapsed is not None else ""
            return f"stopped with {self.error}{on}{after}"
        if self.kind == REFUSE:
            return f"refused to start with {self.error}"
        return "hung" if self.kind == HANG else "ran to the end"


@dataclass(frozen=True)
class Expect:
    """How the fixed stack must end a run, declared on every catalog entry: run to the
    end (``finish``); stop with ``error`` naming an operation of kind ``op`` no later
    than ``within_s`` scenario seconds on the error's own clock (``stop``; without
    ``op`` and ``within_s``, a stop with ``error`` on any operation, its timing left to
    the properties); or refuse to start with ``error`` (``refuse``). ``alternatives``
    are other endings as good as this one (``finishes().otherwise(stops(...))``). Any
    other ending fails the row."""

    kind: str
    error: str | None = None
    op: str | None = None
    within_s: float | None = None
    alternatives: tuple[Expect, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in (FINISH, STOP, REFUSE):
            raise ValueError(f"an expected ending is finish, stop or refuse, got {self.kind!r}")
        if self.kind != FINISH and not self.error:
            raise ValueError(f"an expected {self.kind} names its error")
        if self.kind == STOP and (self.op is None) != (self.within_s is None):
            raise ValueError("an expected stop names its operation kind and its bound, or neither")

    def otherwise(self, *others: Expect) -> Expect:
        """This ending, or any of ``others``."""
        return replace(self, alternatives=(*self.alternatives, *others))

    def allows(self, kind: str) -> bool:
        """Whether some accepted ending is of ``kind`` (finish, stop or refuse)."""
        return any(e.kind == kind for e in self._each())

    def unmet(self, got: Ending) -> str | None:
        """What is wrong with ``got`` (one line), or None when it is as expected."""
        return None if any(e._met(got) for e in self._each()) else f"expected to {self}; it {got}"

    def _each(self) -> tuple[Expect, ...]:
        return (replace(self, alternatives=()), *self.alternatives)

    def _met(self, got: Ending) -> bool:
        ok = got.kind == self.kind and (self.kind == FINISH or got.error == self.error)
        if ok and self.kind == STOP and self.op is not None and self.within_s is not None:
            ok = got.op == self.op and (got.elapsed is not None and got.elapsed <= self.within_s)
        return ok

    def __str__(self) -> str:
        if self.alternatives:
            return " or ".join(str(e) for e in self._each())
        if self.kind == STOP and self.op is None:
            return f"stop with {self.error}"
        if self.kind == STOP:
            return f"stop with {self.error} on a {self.op} within {self.within_s:g}s"
        if self.kind == REFUSE:
            return f"refuse to start with {self.error}"
        return "run to the end"


def finishes() -> Expect:
    """Runs to the end: no stop, no hang, no startup refusal."""
    return Expect(FINISH)


def stops(error: str, op: str | None = None, within_s: float | None = None) -> Expect:
    """Stops with ``error`` naming a ``op`` operation within ``within_s`` seconds
    (neither given: naming any operation, at any time)."""
    return Expect(STOP, error, op, within_s)


def refuses(error: str) -> Expect:
    """Refuses to start with ``error``."""
    return Expect(REFUSE, error)
