"""The campaign: targets (regressions, faults, scenarios, swarms) on a tier, run over
seeds by one case runner and judged by one judge; the tier is a parameter (an
``Executor``)."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "CampaignError": "faults.campaign.targets",
    "Case": "faults.campaign.targets",
    "KINDS": "faults.campaign.kinds",
    "TargetKind": "faults.campaign.kinds",
    "kind_named": "faults.campaign.kinds",
    "Target": "faults.campaign.targets",
    "fault_target": "faults.campaign.kinds",
    "regression_target": "faults.campaign.kinds",
    "scenario_target": "faults.campaign.kinds",
    "swarm_plan": "faults.campaign.kinds",
    "swarm_target": "faults.campaign.kinds",
    "select_targets": "faults.campaign.select",
    "target_from_json": "faults.campaign.reading",
    "outcome_from_json": "faults.campaign.reading",
    "row_from_json": "faults.campaign.reading",
    "CampaignResult": "faults.campaign.outcomes",
    "CaseOutcome": "faults.campaign.outcomes",
    "TargetOutcome": "faults.campaign.outcomes",
    "signature": "faults.campaign.outcomes",
    "CaseRunner": "faults.campaign.runner",
    "InProcess": "faults.campaign.session",
    "Progress": "faults.campaign.session",
    "Session": "faults.campaign.session",
    "run_campaign": "faults.campaign.session",
    "run_session": "faults.campaign.session",
    "seeds_ran": "faults.campaign.session",
    "CaseResult": "faults.campaign.execute",
    "Executor": "faults.tiers.executor",
    "default_executor": "faults.campaign.execute",
    "check": "faults.campaign.execute",
    "properties_of": "faults.campaign.execute",
    "run_case": "faults.campaign.execute",
    "run_scenario": "faults.campaign.execute",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
