"""Planted regressions: the legacy rules of the seed's old heads, each with the scenario
that shows it and the property that must catch it."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "REGRESSIONS": "kvfault.faults.regressions.legacy",
    "Regression": "kvfault.faults.regressions.legacy",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
