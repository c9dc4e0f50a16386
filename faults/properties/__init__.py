"""Properties checked over a run's trace: each is a function of a RunResult that
returns its violations, with the evidence a reviewer needs. ``PROPERTIES`` is the one
registry; a new property is one ``Property`` class in a module of this package. ``Prop``
names the built-in ones, so code that names a property names a member of a type."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "PROPERTIES": "kvfault.faults.properties.checks",
    "Prop": "kvfault.faults.properties.names",
    "Properties": "kvfault.faults.properties.registry",
    "Property": "kvfault.faults.properties.property",
    "Violation": "kvfault.faults.properties.checks",
    "correctness": "kvfault.faults.properties.checks",
    "efficiency": "kvfault.faults.properties.ledger",
    "exactly_once": "kvfault.faults.properties.ledger",
    "load_failures": "kvfault.faults.properties.ledger",
    "hbm_owners": "kvfault.faults.properties.ledger",
    "resources": "kvfault.faults.properties.ledger",
    "grid": "kvfault.faults.properties.checks",
    "hybrid": "kvfault.faults.properties.checks",
    "identity": "kvfault.faults.properties.checks",
    "keys": "kvfault.faults.properties.checks",
    "liveness": "kvfault.faults.properties.checks",
    "no_false_stop": "kvfault.faults.properties.checks",
    "usage": "kvfault.faults.properties.checks",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
