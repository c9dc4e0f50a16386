"""What a campaign runs: targets (a regression, a fault, a scenario, a swarm) on a
tier, and cases (a target with one seed). Plain data: a case is what a replay
artifact records."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from faults.argtypes import check_scale
from faults.campaign.kinds import FAULT, REGRESSION, SCENARIO, SWARM, TargetKind, kind_named
from faults.catalog import UnknownName, close_matches, on_tier, resolve
from faults.errors import KvfaultError
from faults.tiers import DEFAULT_TIER, TierError, Tiers

if TYPE_CHECKING:
    from faults.injectors.plans import FaultPlan


class CampaignError(KvfaultError, ValueError):
    """A campaign cannot be assembled (unknown name, wrong tier): one line."""


@dataclass(frozen=True)
class Target:
    """One line of the campaign: a regression, a fault, a scenario or a swarm, on one
    tier (a registered ``faults.tiers.Tier``; by default the in-process one).

    ``stack`` names the stack under test: None for the fixed (reference) stack, or a
    planted regression whose legacy rules stand in for it (``kvfault run --legacy
    NAME``): a stack with a known bug, to see what the campaign says about it."""

    kind: TargetKind  # its JSON, id and table name it by ``kind.name``
    name: str
    scenario: str
    regression: str | None = None
    injector: str | None = None
    pinned: tuple[str, ...] = ()  # swarm only: injectors every run enables
    tier: str = DEFAULT_TIER
    scale: int = 1  # the scenario's size (``faults.runs.RunContext.scale``)
    stack: str | None = None  # None: the fixed stack; else a regression's legacy rules
    # The tier's own options as the command line gave them (``--atom-src .``): a replay
    # command repeats them. Not part of the id: they say where, not what.
    options: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        at = f"-x{self.scale}" if self.scale != 1 else ""
        on = f"-legacy-{self.stack}" if self.stack else ""
        base = f"{self.kind.name}:{self.name}{at}{on}"
        return base if self.tier == DEFAULT_TIER else f"{self.tier}:{base}"

    def rules(self) -> Any:
        """The rules of the stack under test (``reference.rules.Rules``)."""
        if self.stack is None:
            from reference.rules import Rules

            return Rules()
        from faults.regressions.legacy import REGRESSIONS

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

    @classmethod
    def from_json(cls, obj: Any) -> Target:
        """Rebuild a target and check it still names things this version knows;
        raises ``CampaignError`` with one clear line."""
        if not isinstance(obj, dict):
            raise CampaignError("a target is a JSON object")
        try:
            kind = kind_named(obj.get("kind"))
        except ValueError as exc:
            raise CampaignError(str(exc)) from None
        name = obj.get("name")
        if not isinstance(name, str):
            raise CampaignError("target 'name' must be a string")
        tier = obj.get("tier", DEFAULT_TIER)
        installed = Tiers.installed()
        if tier not in installed.names:
            names = ", ".join(installed.names)
            raise CampaignError(f"target tier must be one of {names}, got {tier!r}")
        pinned = obj.get("pinned") or []
        if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
            raise CampaignError("target 'pinned' must be a list of injector names")
        from faults.injectors.catalog import INJECTORS

        unknown = [p for p in pinned if p not in INJECTORS]
        if unknown:
            raise CampaignError(f"target 'pinned' names no injector: {', '.join(unknown)}")
        try:
            scale = check_scale(obj.get("scale", 1))
        except ValueError as exc:
            raise CampaignError(f"target {exc}") from None
        stack = obj.get("stack")
        if stack is not None:
            _legacy_stack(stack, kind, tier)
        options = obj.get("options") or []
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise CampaignError("target 'options' must be a list of command-line words")
        # Its replay opens the tier with them: each must be one the tier takes, as given.
        try:
            given = installed[tier].opener_options(options)
        except ValueError as exc:
            raise CampaignError(f"target 'options': {exc}") from None
        why = installed[tier].refused(argparse.Namespace(**given, scenario=[name]))
        if why:
            raise CampaignError(f"target 'options': {why}")
        target = kind.build(name, tier, {**obj, "pinned": pinned})
        return replace(target, scale=scale, stack=stack, options=tuple(options))


def _legacy_stack(name: Any, kind: TargetKind | None = None, tier: str = DEFAULT_TIER) -> str:
    """``name`` checked as a stack under test: a planted regression's legacy rules, for
    fault, scenario and swarm rows on a tier that runs fault plans (the in-process
    one); one-line ``CampaignError``."""
    from faults.regressions.legacy import REGRESSIONS

    if not isinstance(name, str) or name not in REGRESSIONS:
        raise CampaignError(
            f"unknown regression {name!r} for --legacy{close_matches(str(name), REGRESSIONS)}"
        )
    if kind is not None and not kind.takes_legacy_stack:
        raise CampaignError(
            "--legacy runs the fault, scenario and swarm rows against a legacy stack; a "
            "regression row already runs its legacy against the fixed stack: drop --regression"
        )
    if not _tier(tier).plans:
        raise CampaignError(f"--legacy runs on --tier {_planning()}")
    return name


def _tier(name: str) -> Any:
    """The registered tier ``name`` (``faults.tiers.Tier``); one-line ``CampaignError``."""
    try:
        return Tiers.installed()[name]
    except TierError as exc:
        raise CampaignError(str(exc)) from None


def _planning() -> str:
    """The tiers that run in-process fault plans (``--swarm``, ``--legacy``), as
    ``--tier`` names them."""
    return " or --tier ".join(t.name for t in Tiers.installed() if t.plans)


def _resolve(kind: TargetKind, name: str, tier: str) -> str:
    """The scenario ``name`` runs on with ``tier``; one-line ``CampaignError`` else."""
    try:
        return resolve(kind.name, name, tier).scenarios[tier]
    except UnknownName as exc:
        raise CampaignError(str(exc)) from None


def regression_target(name: str, tier: str = DEFAULT_TIER) -> Target:
    return Target(REGRESSION, name, _resolve(REGRESSION, name, tier), regression=name, tier=tier)


def fault_target(name: str, tier: str = DEFAULT_TIER) -> Target:
    return Target(FAULT, name, _resolve(FAULT, name, tier), injector=name, tier=tier)


def scenario_target(name: str, tier: str = DEFAULT_TIER) -> Target:
    return Target(SCENARIO, name, _resolve(SCENARIO, name, tier), tier=tier)


def swarm_target(scenario: str, pinned: Sequence[str] = ()) -> Target:
    """A swarm: random subsets of the in-process injectors on ``scenario``."""
    from faults.injectors.catalog import INJECTORS

    _resolve(SCENARIO, scenario, DEFAULT_TIER)
    for p in pinned:
        if p not in INJECTORS:
            raise CampaignError(f"unknown fault {p!r} in --pin{close_matches(p, INJECTORS)}")
    return Target(SWARM, scenario, scenario, pinned=tuple(pinned))


def swarm_plan(seed: int, scenario: str, pinned: Sequence[str] = ()) -> FaultPlan:
    """The swarm plan of one run on ``scenario``: a random subset of injectors drawn
    from ``seed`` and the scenario (``pinned`` fixes the subset), as
    ``faults.injectors.plans.swarm_plan`` draws it."""
    from faults.injectors.plans import swarm_plan as draw

    return draw(seed, pinned=tuple(pinned) or None, scenario=scenario)


def select_targets(
    regressions: Sequence[str] | None = None,
    faults: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    swarm: bool = False,
    pinned: Sequence[str] = (),
    scale: int = 1,
    tier: str = DEFAULT_TIER,
    stack: str | None = None,
    options: Sequence[str] = (),
) -> list[Target]:
    """The campaign's targets on ``tier``. With no selection at all: every regression,
    every fault (with ``swarm`` instead: a swarm on every scenario) and every scenario
    plain, of those that run on ``tier``. Naming any group runs only what is named;
    with ``swarm``, the scenarios named (default: all) get a swarm target besides
    their plain one. Every target runs its scenario at ``scale``. Unknown names, or
    names of another tier, raise ``CampaignError``. ``stack``: every row runs against
    that regression's legacy rules instead of the fixed stack (no regression rows).
    On a tier whose faults are not plans, faults that kill its server run last, so it
    restarts rarely. ``options``: the tier's own options as given, which every
    target's replay command repeats."""
    known = Tiers.installed().names
    if tier not in known:
        raise CampaignError(f"--tier must be one of {', '.join(known)}, got {tier!r}")
    on = _tier(tier)
    if swarm and not on.plans:
        raise CampaignError(f"--swarm draws in-process injectors: it runs on --tier {_planning()}")
    everything = regressions is None and faults is None and scenarios is None
    if stack is not None:
        _legacy_stack(stack, REGRESSION if regressions else None, tier)

    def names(chosen: Sequence[str] | None, kind: TargetKind) -> list[str]:
        return on_tier(kind.name, tier) if everything else list(chosen or [])

    # A regression row runs its own legacy against the fixed stack: none under --legacy.
    out = [regression_target(n, tier) for n in names(regressions, REGRESSION) if not stack]
    if swarm:
        if faults:
            raise CampaignError("--swarm draws its faults; fix them with --pin, not --fault")
        out += [swarm_target(s, pinned) for s in (scenarios or on_tier(SCENARIO.name, tier))]
    else:
        if pinned:
            raise CampaignError("--pin only makes sense with --swarm")
        out += [fault_target(n, tier) for n in names(faults, FAULT)]
    out += [scenario_target(n, tier) for n in names(scenarios, SCENARIO)]
    try:
        check_scale(scale)
    except ValueError as exc:
        raise CampaignError(str(exc)) from None
    unique = [
        replace(t, scale=scale, stack=stack, options=tuple(options))
        for t in {t.id: t for t in out}.values()
    ]
    if not unique:  # a campaign of nothing would pass: "everything holds" of nothing
        raise CampaignError(f"--tier {tier} has nothing to run: its catalog lists no row")
    if not on.plans:
        unique.sort(key=lambda t: (t.kind.rank, t.kind.restarts_server(t)))
    return unique


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
