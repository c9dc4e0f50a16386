"""The campaign: targets (regressions, faults, scenarios, swarms) run over seeds, one
case runner, one judge."""

from faults._lazy import lazy_exports

_EXPORTS = {
    "CampaignError": "faults.campaign.runner",
    "CampaignResult": "faults.campaign.runner",
    "Case": "faults.campaign.runner",
    "CaseOutcome": "faults.campaign.runner",
    "CaseResult": "faults.campaign.execute",
    "CaseRunner": "faults.campaign.runner",
    "Target": "faults.campaign.runner",
    "TargetOutcome": "faults.campaign.runner",
    "check": "faults.campaign.execute",
    "fault_target": "faults.campaign.runner",
    "regression_target": "faults.campaign.runner",
    "run_campaign": "faults.campaign.runner",
    "run_case": "faults.campaign.execute",
    "run_scenario": "faults.campaign.execute",
    "run_target": "faults.campaign.runner",
    "scenario_target": "faults.campaign.runner",
    "select_targets": "faults.campaign.runner",
    "signature": "faults.campaign.runner",
    "swarm_target": "faults.campaign.runner",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
