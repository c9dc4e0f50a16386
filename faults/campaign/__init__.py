"""The campaign: targets (regressions, faults, scenarios, swarms) on a tier, run over
seeds by one case runner and judged by one judge; the tier is a parameter (an
``Executor``)."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "CampaignError": "kvfault.faults.campaign.targets",
    "Case": "kvfault.faults.campaign.targets",
    "KINDS": "kvfault.faults.campaign.kinds",
    "TargetKind": "kvfault.faults.campaign.kinds",
    "kind_named": "kvfault.faults.campaign.kinds",
    "Target": "kvfault.faults.campaign.targets",
    "fault_target": "kvfault.faults.campaign.kinds",
    "regression_target": "kvfault.faults.campaign.kinds",
    "scenario_target": "kvfault.faults.campaign.kinds",
    "swarm_plan": "kvfault.faults.campaign.kinds",
    "swarm_target": "kvfault.faults.campaign.kinds",
    "select_targets": "kvfault.faults.campaign.select",
    "target_from_json": "kvfault.faults.campaign.reading",
    "outcome_from_json": "kvfault.faults.campaign.reading",
    "row_from_json": "kvfault.faults.campaign.reading",
    "CampaignResult": "kvfault.faults.campaign.outcomes",
    "CaseOutcome": "kvfault.faults.campaign.outcomes",
    "TargetOutcome": "kvfault.faults.campaign.outcomes",
    "signature": "kvfault.faults.campaign.outcomes",
    "CaseRunner": "kvfault.faults.campaign.runner",
    "InProcess": "kvfault.faults.campaign.session",
    "Progress": "kvfault.faults.campaign.session",
    "Session": "kvfault.faults.campaign.session",
    "run_campaign": "kvfault.faults.campaign.session",
    "run_session": "kvfault.faults.campaign.session",
    "seeds_ran": "kvfault.faults.campaign.session",
    "JudgedRun": "kvfault.faults.campaign.execute",
    "Executor": "kvfault.faults.tiers.executor",
    "default_executor": "kvfault.faults.campaign.execute",
    "check": "kvfault.faults.campaign.execute",
    "properties_of": "kvfault.faults.campaign.execute",
    "run_case": "kvfault.faults.campaign.execute",
    "run_scenario": "kvfault.faults.campaign.execute",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
