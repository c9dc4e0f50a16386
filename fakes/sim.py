"""Assembly of a simulated engine: the reference stack on the fakes, in virtual time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kvfault.fakes.clock import VirtualClock
from kvfault.fakes.copy_engine import SimCopyEngine
from kvfault.fakes.kv_pages import SimKvPages
from kvfault.fakes.memory_tier import MemoryTier
from kvfault.fakes.model import ConstantForwardTimer, DeterministicModel
from kvfault.reference.interfaces import Clock, ForwardTimer, LookupClient, Tier
from kvfault.reference.rules import Rules
from kvfault.reference.stack.completion_channel import QueueChannel
from kvfault.reference.stack.engine import Collaborators, Engine, EngineConfig
from kvfault.reference.trace import Trace

# wrap(role, collaborator) -> collaborator; roles: "timer", "tier", "channel", "copy"
Wrap = Callable[[str, Any], Any]


def no_wrap(role: str, part: Any) -> Any:
    return part


@dataclass
class SimWorld:
    """One simulated host: a clock and the trace every engine on it writes to."""

    clock: Clock = field(default_factory=VirtualClock)
    trace: Trace = field(init=False)

    def __post_init__(self) -> None:
        self.trace = Trace(self.clock.now)

    def memory_tier(self, config: EngineConfig, **kwargs: Any) -> MemoryTier:
        return MemoryTier(self.clock, config.geometry, config.state_grid, **kwargs)

    def engine(
        self,
        config: EngineConfig,
        tier: Tier | None = None,
        timer: ForwardTimer | None = None,
        rules: Rules | None = None,
        name: str = "engine",
        lookup: LookupClient | None = None,
        wrap: Wrap = no_wrap,
    ) -> Engine:
        """An engine on this world; ``wrap`` lets a fault injector replace any
        collaborator with a wrapper around it."""
        clock = self.clock
        parts = Collaborators(
            clock=clock,
            model=DeterministicModel(config.model_kind, config.geometry),
            timer=wrap("timer", timer or ConstantForwardTimer()),
            # A tier handed in is already assembled (and wrapped) by its owner.
            tier=tier if tier is not None else wrap("tier", self.memory_tier(config)),
            kv_factory=SimKvPages,
            copy_factory=lambda kv: wrap("copy", SimCopyEngine(clock, kv)),
            channel_factory=lambda trace: wrap("channel", QueueChannel(trace)),
            lookup=lookup,
        )
        return Engine(config, parts, self.trace, rules, name)
