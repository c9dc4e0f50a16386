"""What a campaign runs: targets (a regression, a fault, a scenario, a swarm) on a
tier, and cases (a target with one seed). Plain data: a case is what a replay
artifact records. The bottom of the campaign package: a target's kind
(``kvfault.faults.campaign.kinds``) builds it, ``kvfault.faults.campaign.select`` chooses the
campaign's, and ``kvfault.faults.campaign.reading`` reads one back from its JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kvfault.faults.errors import KvfaultError
from kvfault.faults.tiers import default_tier

if TYPE_CHECKING:
    from kvfault.faults.injectors.plans import FaultPlan


class CampaignError(KvfaultError, ValueError):
    """A campaign cannot be assembled (unknown name, wrong tier): one line."""


class KindOfTarget(Protocol):
    """What this module and ``kvfault.faults.campaign.outcomes`` ask of a target's kind: its
    name, the plan and replay command of a seed, whether its plans are drawn. Kinds
    (``kvfault.faults.campaign.kinds.TargetKind``) build targets, so this module names
    them by this shape; a module above them gets the whole kind with ``kinds.kind_of``."""

    @property
    def name(self) -> str: ...

    @property
    def draws_faults(self) -> bool: ...

    def plan(self, target: Target, seed: int) -> FaultPlan | None: ...

    def command(self, target: Target, seed: int) -> str: ...


@dataclass(frozen=True)
class Target:
    """One line of the campaign: a regression, a fault, a scenario or a swarm, on one
    tier (a registered ``kvfault.faults.tiers.Tier``; by default the default tier,
    ``kvfault.faults.tiers.Tiers.default``).

    ``stack`` names the stack under test: None for the fixed (reference) stack, or a
    planted regression whose legacy rules stand in for it (``kvfault run --legacy
    NAME``): a stack with a known bug, to see what the campaign says about it."""

    kind: KindOfTarget  # its JSON, id and table name it by ``kind.name``
    name: str
    scenario: str
    regression: str | None = None
    injector: str | None = None
    pinned: tuple[str, ...] = ()  # swarm only: injectors every run enables
    tier: str = field(default_factory=default_tier)
    scale: int = 1  # the scenario's size (``faults.runs.RunContext.scale``)
    stack: str | None = None  # None: the fixed stack; else a regression's legacy rules
    # The tier's own options as the command line gave them (``--FLAG VALUE``): a replay
    # command repeats them. Not part of the id: they say where, not what.
    options: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        at = f"-x{self.scale}" if self.scale != 1 else ""
        on = f"-legacy-{self.stack}" if self.stack else ""
        base = f"{self.kind.name}:{self.name}{at}{on}"
        return base if self.tier == default_tier() else f"{self.tier}:{base}"

    def rules(self) -> Any:
        """The rules of the stack under test (``kvfault.reference.rules.Rules``)."""
        # Imported when asked for: reading a target costs no rule or regression module.
        if self.stack is None:
            from kvfault.reference.rules import Rules

            return Rules()
        from kvfault.faults.regressions.legacy import REGRESSIONS

        return REGRESSIONS[self.stack].rules

    def plan(self, seed: int) -> FaultPlan | None:
        """The in-process fault plan of this target's run with ``seed`` (None: no plan;
        a fault of a tier whose faults are not plans is built by that tier's catalog)."""
        return self.kind.plan(self, seed)

    def command(self, seed: int) -> str:
        """The one ``kvfault`` command that replays this target's run with ``seed``."""
        return self.kind.command(self, seed)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.name,
            "name": self.name,
            "scenario": self.scenario,
            "regression": self.regression,
            "injector": self.injector,
            "pinned": list(self.pinned),
            "tier": self.tier,
            **({"scale": self.scale} if self.scale != 1 else {}),
            **({"stack": self.stack} if self.stack else {}),
            **({"options": list(self.options)} if self.options else {}),
        }


@dataclass(frozen=True)
class Case:
    """One run of a target with one seed: what a replay artifact records. ``recorded``
    is a plan read back from an artifact: a replay runs it, not a fresh draw."""

    target: Target
    seed: int
    recorded: FaultPlan | None = None

    @property
    def id(self) -> str:
        return f"{self.target.id}@seed{self.seed}"

    @property
    def command(self) -> str:
        return self.target.command(self.seed)

    def plan(self) -> FaultPlan | None:
        if self.recorded is not None:
            return self.recorded
        return self.target.plan(self.seed)
