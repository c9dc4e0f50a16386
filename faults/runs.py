"""The vocabulary of one run: what a run is made from (``RunContext``) and what it
leaves for the judge (``RunResult``). Scenarios build runs from a context; injectors
rewrite a context; properties read a result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from fakes.clock import VirtualClock
from fakes.model import DeterministicModel
from fakes.sim import SimWorld
from reference.interfaces import Clock, Tier
from reference.rules import Rules
from reference.stack.engine import EngineConfig, RunOutcome
from reference.trace import Trace
from reference.types import Request

if TYPE_CHECKING:  # injectors sit above this module; the fields only need the type
    from faults.injectors.base import Injector


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
    outcomes: list[RunOutcome]
    injectors: list[Injector]
    notes: dict[str, object] = field(default_factory=dict)
    startup_error: str | None = None

    @property
    def model(self) -> DeterministicModel:
        return DeterministicModel(self.config.model_kind, self.config.geometry)

    @property
    def stop(self):
        return next((o.stopped for o in self.outcomes if o.stopped), None)

    @property
    def hung(self) -> bool:
        return any(o.hung for o in self.outcomes)

    @property
    def sim_seconds(self) -> float:
        return self.trace.events[-1].t if self.trace.events else 0.0
