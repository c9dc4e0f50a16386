"""The built-in properties' names, as one type: code that names a property (a
scenario's list, a regression's signature, a tier's ``judged_by``, the judge) says
``Prop.KEYS``, so a rename or a misspelling fails at import and in mypy, not as a
property that silently checks nothing. A ``Property`` class names itself (its
``name``), so adding one touches nothing here."""

from __future__ import annotations

import enum


class Prop(str, enum.Enum):
    """A built-in property's name. Each member is the plain string it stands for
    (equal to it, hashed and printed alike), so verdict files, digests and messages
    are what they were with strings."""

    CORRECTNESS = "correctness"
    USAGE = "usage"
    KEYS = "keys"
    IDENTITY = "identity"
    GRID = "grid"
    HYBRID = "hybrid"
    NO_FALSE_STOP = "no_false_stop"
    LIVENESS = "liveness"
    # Compares two runs of one seed; kvfault.faults.campaign.execute checks it.
    DETERMINISM = "determinism"
    EFFICIENCY = "efficiency"
    EXACTLY_ONCE = "exactly_once"
    RESOURCES = "resources"
    LOAD_FAILURES = "load_failures"
    HBM_OWNERS = "hbm_owners"

    # Printed, formatted or shown in a repr (a dataclass's, an ``!r`` in a message) it
    # is the string it stands for, not ``Prop.KEYS`` or ``<Prop.KEYS: 'keys'>`` (the
    # same on every Python: 3.10 has no ``enum.StrEnum``, and 3.12 changed ``format``).
    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    def __repr__(self) -> str:
        return str.__repr__(self)
