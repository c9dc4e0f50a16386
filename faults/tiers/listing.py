"""What every tier's own ``kvfault list --tier NAME`` (``Tier.listing``) says the same
way: whether a part was asked for, the properties that judge the tier's rows, and what
of kvfault's catalog does not run there and why. The rows themselves are the tier's to
show."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

# ``kvfault list``'s part flags: with none of them given, every part is listed.
PARTS = ("scenarios", "properties", "faults", "regressions", "tiers")


def shows_all(args: Any) -> bool:
    """No part was asked for (``--scenarios``, ``--faults``, ...): list them all."""
    return not any(getattr(args, part, False) for part in PARTS)


def print_properties(tier: str, used: Collection[str]) -> None:
    """The properties of ``used``, in the registry's order, each with the first
    sentence of what it catches."""
    from kvfault.faults.properties.checks import PROPERTIES

    print(f"properties (--tier {tier}):")
    for p in PROPERTIES:
        if p in used:
            doc = " ".join((PROPERTIES[p].__doc__ or "").split()).split(". ")[0]
            print(f"  {p}  {doc}")


def print_not_here(tier: str, not_here: Mapping[str, str]) -> None:
    """What of kvfault's catalog does not run on ``tier``, each with why."""
    print(f"not on --tier {tier}:")
    for what, why in not_here.items():
        print(f"  {what}: {why}")
