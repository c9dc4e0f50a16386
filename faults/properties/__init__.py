"""Properties checked over a run's trace: each is a function of a RunResult that
returns its violations, with the evidence a reviewer needs. ``PROPERTIES`` is the one
registry; a new property is one ``Property`` class in a module of this package."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "PROPERTIES": "faults.properties.checks",
    "Properties": "faults.properties.registry",
    "Property": "faults.properties.property",
    "Violation": "faults.properties.checks",
    "correctness": "faults.properties.checks",
    "efficiency": "faults.properties.ledger",
    "exactly_once": "faults.properties.ledger",
    "load_failures": "faults.properties.ledger",
    "hbm_owners": "faults.properties.ledger",
    "resources": "faults.properties.ledger",
    "grid": "faults.properties.checks",
    "hybrid": "faults.properties.checks",
    "identity": "faults.properties.checks",
    "keys": "faults.properties.checks",
    "liveness": "faults.properties.checks",
    "no_false_stop": "faults.properties.checks",
    "usage": "faults.properties.checks",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
