"""kvfault: named, seeded fault injection for KV-cache offload, judged over traces.

Layout (dependencies point down; ``lint-imports`` enforces it):
- user edges: ``cli``, ``pytest_plugin``, ``sweep``, ``repro``, ``prove``, ``strategies``;
- ``report/``: summary, JUnit, replay artifacts, timelines;
- ``campaign/``: targets, the case runner and the judge;
- ``lmcache/``: the real-LMCache harness (server, wire proxy, real-tier scenarios);
- ``scenarios/``, ``properties/``, ``regressions/``: workloads, checkers, planted bugs;
- ``injectors/``: the fault vocabulary (injectors, plans);
- ``runs``: what one run is made from and what it leaves.
"""

from reference._lazy import lazy_exports

_EXPORTS = {
    "FaultPlan": "faults.injectors.plans",
    "FaultSpec": "faults.injectors.plans",
    "INJECTORS": "faults.injectors.catalog",
    "KvfaultError": "faults.errors",
    "PROPERTIES": "faults.properties.checks",
    "REGRESSIONS": "faults.regressions.legacy",
    "SCENARIOS": "faults.scenarios.catalog",
    "RunContext": "faults.runs",
    "RunResult": "faults.runs",
    "run_case": "faults.campaign.execute",
    "run_campaign": "faults.campaign.session",
    "select_targets": "faults.campaign.select",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
