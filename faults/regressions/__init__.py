"""Planted regressions: the legacy rules of the seed's old heads, each with the scenario
that shows it and the property that must catch it."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "REGRESSIONS": "faults.regressions.legacy",
    "Regression": "faults.regressions.legacy",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
