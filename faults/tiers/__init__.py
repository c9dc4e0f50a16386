"""Tiers as plugins: what a tier declares (``Tier``), and the tiers installed here
(``Tiers``, read from the ``kvfault.tiers`` entry-point group when first needed).
Importing this package imports no tier."""

from kvfault.faults.tiers.executor import Executor
from kvfault.faults.tiers.registry import GROUP, Tiers
from kvfault.faults.tiers.tier import (
    DEFAULT_TIER,
    ROW_KINDS,
    FaultPlans,
    Row,
    Selection,
    Tier,
    TierError,
    TierFault,
    TierOption,
    TierUnavailable,
)

__all__ = [
    "DEFAULT_TIER",
    "Executor",
    "FaultPlans",
    "GROUP",
    "ROW_KINDS",
    "Row",
    "Selection",
    "Tier",
    "TierError",
    "TierFault",
    "TierOption",
    "TierUnavailable",
    "Tiers",
]
