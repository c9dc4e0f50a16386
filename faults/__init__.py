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

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "FaultPlan": "kvfault.faults.injectors.plans",
    "FaultSpec": "kvfault.faults.injectors.plans",
    "INJECTORS": "kvfault.faults.injectors.catalog",
    "KvfaultError": "kvfault.faults.errors",
    "PROPERTIES": "kvfault.faults.properties.checks",
    "REGRESSIONS": "kvfault.faults.regressions.legacy",
    "SCENARIOS": "kvfault.faults.scenarios.catalog",
    "RunContext": "kvfault.faults.runs",
    "RunResult": "kvfault.faults.runs",
    "run_case": "kvfault.faults.campaign.execute",
    "run_campaign": "kvfault.faults.campaign.session",
    "select_targets": "kvfault.faults.campaign.select",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
