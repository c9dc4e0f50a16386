"""What a campaign runs: targets (a regression, a fault, a scenario, a swarm) on a
tier, and cases (a target with one seed). Plain data: a case is what a replay
artifact records."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from faults.argtypes import check_scale
from faults.catalog import TIERS, UnknownName, close_matches, on_tier, resolve
from faults.errors import KvfaultError

if TYPE_CHECKING:
    from faults.injectors.plans import FaultPlan

KINDS = ("regression", "fault", "scenario", "swarm")


class CampaignError(KvfaultError, ValueError):
    """A campaign cannot be assembled (unknown name, wrong tier): one line."""


@dataclass(frozen=True)
class Target:
    """One line of the campaign: a regression, a fault, a scenario or a swarm, on one
    tier (``memory``: in-process, virtual time; ``lmcache``: a real server).

    ``stack`` names the stack under test: None for the fixed (reference) stack, or a
    planted regression whose legacy rules stand in for it (``kvfault run --legacy
    NAME``): a stack with a known bug, to see what the campaign says about it."""

    kind: str
    name: str
    scenario: str
    regression: str | None = None
    injector: str | None = None
    pinned: tuple[str, ...] = ()  # swarm only: injectors every run enables
    tier: str = "memory"
    scale: int = 1  # the scenario's size (``faults.runs.RunContext.scale``)
    stack: str | None = None  # None: the fixed stack; else a regression's legacy rules

    @property
    def id(self) -> str:
        at = f"-x{self.scale}" if self.scale != 1 else ""
        on = f"-legacy-{self.stack}" if self.stack else ""
        base = f"{self.kind}:{self.name}{at}{on}"
        return base if self.tier == "memory" else f"{self.tier}:{base}"

    def rules(self) -> Any:
        """The rules of the stack under test (``reference.rules.Rules``)."""
        if self.stack is None:
            from reference.rules import Rules

            return Rules()
        from faults.regressions.legacy import REGRESSIONS

        return REGRESSIONS[self.stack].rules

    def plan(self, seed: int) -> FaultPlan | None:
        """The in-process fault plan of this target's run with ``seed`` (None: no plan;
        a wire fault is built by the real tier's catalog, not by a plan)."""
        from faults.injectors.plans import INJECTORS, FaultPlan, FaultSpec

        if self.kind == "fault" and self.tier == "memory":
            assert self.injector is not None
            spec = FaultSpec.of(self.injector, **INJECTORS[self.injector].defaults)
            return FaultPlan((spec,), seed, self.scale)
        if self.kind == "swarm":
            return replace(swarm_plan(seed, self.scenario, self.pinned), scale=self.scale)
        return None

    def command(self, seed: int) -> str:
        """The one ``kvfault`` command that replays this target's run with ``seed``."""
        scaled = ["--scale", str(self.scale)] if self.scale != 1 else []
        if self.kind == "regression" and self.tier == "memory" and not scaled:
            return f"kvfault repro {self.name} --seed {seed}"
        tier = ["--tier", self.tier] if self.tier != "memory" else []
        legacy = ["--legacy", self.stack] if self.stack else []
        base = ["kvfault", "run", *tier, *legacy, "--first-seed", str(seed), "--seeds", "1",
                *scaled]  # fmt: skip
        if self.kind == "regression":
            return shlex.join([*base, "--regression", self.name])
        if self.kind == "fault":
            return shlex.join([*base, "--fault", str(self.injector)])
        if self.kind == "swarm":
            pins = ["--pin", ",".join(self.pinned)] if self.pinned else []
            return shlex.join([*base, "--swarm", "--scenario", self.scenario, *pins])
        return shlex.join([*base, "--scenario", self.scenario])

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "scenario": self.scenario,
            "regression": self.regression,
            "injector": self.injector,
            "pinned": list(self.pinned),
            "tier": self.tier,
            **({"scale": self.scale} if self.scale != 1 else {}),
            **({"stack": self.stack} if self.stack else {}),
        }

    @classmethod
    def from_json(cls, obj: Any) -> Target:
        """Rebuild a target and check it still names things this version knows;
        raises ``CampaignError`` with one clear line."""
        if not isinstance(obj, dict):
            raise CampaignError("a target is a JSON object")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise CampaignError(f"target kind must be one of {', '.join(KINDS)}, got {kind!r}")
        name = obj.get("name")
        if not isinstance(name, str):
            raise CampaignError("target 'name' must be a string")
        tier = obj.get("tier", "memory")
        if tier not in TIERS:
            raise CampaignError(f"target tier must be one of {', '.join(TIERS)}, got {tier!r}")
        pinned = obj.get("pinned") or []
        if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
            raise CampaignError("target 'pinned' must be a list of injector names")
        try:
            scale = check_scale(obj.get("scale", 1))
        except ValueError as exc:
            raise CampaignError(f"target {exc}") from None
        stack = obj.get("stack")
        if stack is not None:
            _legacy_stack(stack, kind, tier)
        if kind == "regression":
            target = regression_target(name, tier)
        elif kind == "fault":
            target = fault_target(name, tier)
        elif kind == "scenario":
            target = scenario_target(name, tier)
        else:
            scenario = obj.get("scenario")
            if not isinstance(scenario, str):
                raise CampaignError("swarm target needs a 'scenario' name")
            target = swarm_target(scenario, tuple(pinned))
        return replace(target, scale=scale, stack=stack)


def _legacy_stack(name: Any, kind: str | None = None, tier: str = "memory") -> str:
    """``name`` checked as a stack under test: a planted regression's legacy rules, for
    fault, scenario and swarm rows on the in-process tier; one-line ``CampaignError``."""
    from faults.regressions.legacy import REGRESSIONS

    if not isinstance(name, str) or name not in REGRESSIONS:
        raise CampaignError(
            f"unknown regression {name!r} for --legacy{close_matches(str(name), REGRESSIONS)}"
        )
    if kind == "regression":
        raise CampaignError(
            "--legacy runs the fault, scenario and swarm rows against a legacy stack; a "
            "regression row already runs its legacy against the fixed stack: drop --regression"
        )
    if tier != "memory":
        raise CampaignError("--legacy runs on --tier memory")
    return name


def _resolve(kind: str, name: str, tier: str) -> str:
    """The scenario ``name`` runs on with ``tier``; one-line ``CampaignError`` else."""
    try:
        return resolve(kind, name, tier).scenarios[tier]
    except UnknownName as exc:
        raise CampaignError(str(exc)) from None


def regression_target(name: str, tier: str = "memory") -> Target:
    return Target(
        "regression", name, _resolve("regression", name, tier), regression=name, tier=tier
    )


def fault_target(name: str, tier: str = "memory") -> Target:
    return Target("fault", name, _resolve("fault", name, tier), injector=name, tier=tier)


def scenario_target(name: str, tier: str = "memory") -> Target:
    return Target("scenario", name, _resolve("scenario", name, tier), tier=tier)


def swarm_target(scenario: str, pinned: Sequence[str] = ()) -> Target:
    """A swarm: random subsets of the in-process injectors on ``scenario``."""
    from faults.injectors.plans import INJECTORS

    _resolve("scenario", scenario, "memory")
    for p in pinned:
        if p not in INJECTORS:
            raise CampaignError(f"unknown fault {p!r} in --pin{close_matches(p, INJECTORS)}")
    return Target("swarm", f"{scenario}", scenario, pinned=tuple(pinned))


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
    tier: str = "memory",
    stack: str | None = None,
) -> list[Target]:
    """The campaign's targets on ``tier``. With no selection at all: every regression,
    every fault (with ``swarm`` instead: a swarm on every scenario) and every scenario
    plain, of those that run on ``tier``. Naming any group runs only what is named;
    with ``swarm``, the scenarios named (default: all) get a swarm target besides
    their plain one. Every target runs its scenario at ``scale``. Unknown names, or
    names of another tier, raise ``CampaignError``. ``stack``: every row runs against
    that regression's legacy rules instead of the fixed stack (no regression rows).
    On the lmcache tier, faults that kill the server run last, so it restarts rarely."""
    if tier not in TIERS:
        raise CampaignError(f"--tier must be one of {', '.join(TIERS)}, got {tier!r}")
    if swarm and tier != "memory":
        raise CampaignError("--swarm draws in-process injectors: it runs on --tier memory")
    everything = regressions is None and faults is None and scenarios is None
    if stack is not None:
        _legacy_stack(stack, "regression" if regressions else None, tier)

    def names(chosen: Sequence[str] | None, kind: str) -> list[str]:
        return on_tier(kind, tier) if everything else list(chosen or [])

    # A regression row runs its own legacy against the fixed stack: none under --legacy.
    out = [regression_target(n, tier) for n in names(regressions, "regression") if not stack]
    if swarm:
        if faults:
            raise CampaignError("--swarm draws its faults; fix them with --pin, not --fault")
        out += [swarm_target(s, pinned) for s in (scenarios or on_tier("scenario", tier))]
    else:
        if pinned:
            raise CampaignError("--pin only makes sense with --swarm")
        out += [fault_target(n, tier) for n in names(faults, "fault")]
    out += [scenario_target(n, tier) for n in names(scenarios, "scenario")]
    try:
        check_scale(scale)
    except ValueError as exc:
        raise CampaignError(str(exc)) from None
    unique = [replace(t, scale=scale, stack=stack) for t in {t.id: t for t in out}.values()]
    if tier == "lmcache":
        from faults.lmcache.wire_faults import WIRE_FAULTS

        def kills(t: Target) -> bool:
            return t.kind == "fault" and WIRE_FAULTS[t.name].kills_server

        order = {"scenario": 0, "regression": 1, "fault": 2}
        unique.sort(key=lambda t: (order[t.kind], kills(t)))
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
