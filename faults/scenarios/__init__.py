"""Named, parameterised workloads: each assembles engines on a simulated host, runs its
workload and returns a kvfault.faults.runs.RunResult for the properties to judge."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "SCENARIOS": "kvfault.faults.scenarios.catalog",
    "Scenario": "kvfault.faults.scenarios.scenario",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
