"""Choosing a campaign's targets from the command line's names (``select_targets``),
checked against the registered tiers: one line (``CampaignError``) for what cannot
run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from kvfault.faults.argtypes import check_scale
from kvfault.faults.campaign.kinds import (
    FAULT,
    REGRESSION,
    SCENARIO,
    TargetKind,
    fault_target,
    kind_of,
    regression_target,
    scenario_target,
    swarm_target,
)
from kvfault.faults.campaign.targets import CampaignError, Target
from kvfault.faults.catalog import close_matches, on_tier
from kvfault.faults.regressions.legacy import REGRESSIONS
from kvfault.faults.tiers import ROW_KINDS, Tier, TierError, Tiers, tier_or_default


def select_targets(
    regressions: Sequence[str] | None = None,
    faults: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    swarm: bool = False,
    pinned: Sequence[str] = (),
    scale: int = 1,
    tier: str | None = None,
    stack: str | None = None,
    options: Sequence[str] = (),
    full: bool = False,
) -> list[Target]:
    """The campaign's targets on ``tier``. With no selection at all: every regression,
    every fault (with ``swarm`` instead: a swarm on every scenario) and every scenario
    plain, of those that run on ``tier``, less the rows of its long matrix
    (``long_matrix``) unless ``full``. Naming any group runs only what is named;
    with ``swarm``, the scenarios named (default: all) get a swarm target besides
    their plain one. Every target runs its scenario at ``scale``. Unknown names, or
    names of another tier, raise ``CampaignError``. ``stack``: every row runs against
    that regression's legacy rules instead of the fixed stack (no regression rows).
    On a tier whose faults are not plans, faults that kill its server run last, so it
    restarts rarely. ``options``: the tier's own options as given, which every
    target's replay command repeats. ``tier``: default, the default tier
    (``kvfault.faults.tiers.Tiers.default``)."""
    tier = tier_or_default(tier)
    known = Tiers.installed().names
    if tier not in known:
        raise CampaignError(f"--tier must be one of {', '.join(known)}, got {tier!r}")
    on = _tier(tier)
    if swarm and not on.fault_plans:
        raise CampaignError(f"--swarm draws in-process injectors: it runs on --tier {_planning()}")
    everything = regressions is None and faults is None and scenarios is None
    if stack is not None:
        legacy_stack(stack, REGRESSION if regressions else None, tier)

    left_out = set() if full else set(long_matrix(tier))

    def names(chosen: Sequence[str] | None, kind: TargetKind) -> list[str]:
        if everything:
            return [n for n in on_tier(kind.name, tier) if n not in left_out]
        return list(chosen or [])

    # A regression row runs its own legacy against the fixed stack: none under --legacy.
    out = [regression_target(n, tier) for n in names(regressions, REGRESSION) if not stack]
    if swarm:
        if faults:
            raise CampaignError("--swarm draws its faults; fix them with --pin, not --fault")
        out += [swarm_target(s, pinned, tier) for s in (scenarios or on_tier(SCENARIO.name, tier))]
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
    if not on.fault_plans:
        unique.sort(key=lambda t: (kind_of(t).rank, kind_of(t).restarts_server(t)))
    return unique


def long_matrix(tier: str) -> list[str]:
    """The rows of ``tier`` that a run of every row leaves out unless ``--full``
    (``kvfault.faults.tiers.Row.full``), in catalog order; named, each runs."""
    on = _tier(tier)
    return [r.name for kind in ROW_KINDS for r in on.rows(kind) if r.full]


def legacy_stack(name: Any, kind: TargetKind | None = None, tier: str | None = None) -> str:
    """``name`` checked as a stack under test: a planted regression's legacy rules, for
    fault, scenario and swarm rows on a tier that runs fault plans (``tier``, default:
    the default tier); one-line ``CampaignError``."""
    if not isinstance(name, str) or name not in REGRESSIONS:
        raise CampaignError(
            f"unknown regression {name!r} for --legacy{close_matches(str(name), REGRESSIONS)}"
        )
    if kind is not None and not kind.takes_legacy_stack:
        raise CampaignError(
            "--legacy runs the fault, scenario and swarm rows against a legacy stack; a "
            "regression row already runs its legacy against the fixed stack: drop --regression"
        )
    if not _tier(tier_or_default(tier)).fault_plans:
        raise CampaignError(f"--legacy runs on --tier {_planning()}")
    return name


def _tier(name: str) -> Tier:
    """The registered tier ``name`` (``kvfault.faults.tiers.Tier``); one-line ``CampaignError``."""
    try:
        return Tiers.installed()[name]
    except TierError as exc:
        raise CampaignError(str(exc)) from None


def _planning() -> str:
    """The tiers that run in-process fault plans (``--swarm``, ``--legacy``), as
    ``--tier`` names them."""
    return " or --tier ".join(t.name for t in Tiers.installed() if t.fault_plans)
