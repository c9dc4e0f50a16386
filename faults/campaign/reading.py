"""Reading a campaign's records back from their plain JSON (a replay artifact's
target, a worker's outcomes), each checked against what this version and the
registered tiers know: one line (``CampaignError``) for what it cannot use."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvfault.faults.argtypes import check_scale
from kvfault.faults.campaign.kinds import kind_named
from kvfault.faults.campaign.outcomes import CaseOutcome, TargetOutcome
from kvfault.faults.campaign.select import legacy_stack
from kvfault.faults.campaign.targets import CampaignError, Case, Target
from kvfault.faults.properties.violation import Violation
from kvfault.faults.tiers import Selection, Tiers, default_tier


def target_from_json(obj: Any) -> Target:
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
    tier = obj["tier"] if "tier" in obj else default_tier()
    installed = Tiers.installed()
    if tier not in installed.names:
        names = ", ".join(installed.names)
        raise CampaignError(f"target tier must be one of {names}, got {tier!r}")
    pinned = obj.get("pinned") or []
    if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
        raise CampaignError("target 'pinned' must be a list of injector names")
    plans = installed[tier].plans()  # a tier without fault plans pins nothing
    unknown = [p for p in pinned if plans is None or p not in plans.faults()]
    if unknown:
        raise CampaignError(f"target 'pinned' names no injector: {', '.join(unknown)}")
    try:
        scale = check_scale(obj.get("scale", 1))
    except ValueError as exc:
        raise CampaignError(f"target {exc}") from None
    stack = obj.get("stack")
    if stack is not None:
        legacy_stack(stack, kind, tier)
    options = obj.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise CampaignError("target 'options' must be a list of command-line words")
    # Its replay opens the tier with them: each must be one the tier takes, as given.
    try:
        given = installed[tier].opener_options(options)
    except ValueError as exc:
        raise CampaignError(f"target 'options': {exc}") from None
    why = installed[tier].refused(Selection(scenarios=(name,), options=given))
    if why:
        raise CampaignError(f"target 'options': {why}")
    target = kind.build(name, tier, {**obj, "pinned": pinned})
    return replace(target, scale=scale, stack=stack, options=tuple(options))


def outcome_from_json(obj: dict[str, Any]) -> CaseOutcome:
    """The case record ``CaseOutcome.as_json`` wrote (a worker's, sent back)."""
    return CaseOutcome(
        case=Case(target_from_json(obj["target"]), int(obj["seed"])),
        verdict=obj["verdict"],
        signature=obj.get("signature", ""),
        violations=[Violation.from_json(v) for v in obj.get("violations", [])],
        legacy_violations=[Violation.from_json(v) for v in obj.get("legacy_violations", [])],
        stop=obj.get("stop"),
        legacy_stop=obj.get("legacy_stop"),
        fired=dict(obj.get("fired", {})),
        wall_seconds=float(obj.get("wall_seconds", 0.0)),
        sim_seconds=float(obj.get("sim_seconds", 0.0)),
        digest=obj.get("digest", ""),
        error=obj.get("error"),
        checked=list(obj.get("properties", [])),
        timeout_s=obj.get("timeout_s"),
    )


def row_from_json(obj: dict[str, Any]) -> TargetOutcome:
    """The row ``TargetOutcome.as_json`` wrote, with its cases."""
    return TargetOutcome(
        target_from_json(obj["target"]), [outcome_from_json(c) for c in obj["cases"]]
    )
