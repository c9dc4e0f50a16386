"""Assembly of a simulated engine: the reference stack on the fakes, in virtual time."""

from __future__ import annotations

from dataclasses import dataclass, field

from fakes.clock import VirtualClock
from fakes.copy_engine import SimCopyEngine
from fakes.kv_pages import SimKvPages
from fakes.memory_tier import MemoryTier
from fakes.model import ConstantForwardTimer, DeterministicModel
from reference.engine import Collaborators, Engine, EngineConfig
from reference.interfaces import ForwardTimer, Tier
from reference.rules import Rules
from reference.trace import Trace


@dataclass
class SimWorld:
    """One simulated host: a clock, a trace and the tiers engines share."""

    clock: VirtualClock = field(default_factory=VirtualClock)
    trace: Trace = field(init=False)

    def __post_init__(self) -> None:
        self.trace = Trace(self.clock.now)

    def memory_tier(self, config: EngineConfig, **kwargs) -> MemoryTier:
        return MemoryTier(self.clock, config.geometry, config.state_grid, **kwargs)

    def engine(
        self,
        config: EngineConfig,
        tier: Tier | None = None,
        timer: ForwardTimer | None = None,
        rules: Rules | None = None,
        name: str = "engine",
        **parts,
    ) -> Engine:
        clock = self.clock
        model = DeterministicModel(config.model_kind, config.geometry)
        collaborators = Collaborators(
            clock=clock,
            model=model,
            timer=timer or ConstantForwardTimer(),
            tier=tier or self.memory_tier(config),
            kv_factory=SimKvPages,
            copy_factory=lambda kv: SimCopyEngine(clock, kv),
            **parts,
        )
        return Engine(config, collaborators, self.trace, rules, name)
