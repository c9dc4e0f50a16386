"""Tiers as plugins: what a tier declares (``Tier``), and the tiers installed here
(``Tiers``, read from the ``kvfault.tiers`` entry-point group when first needed).
Importing this package imports no tier."""

from kvfault.faults.tiers.executor import Executor
from kvfault.faults.tiers.registry import GROUP, Tiers, default_tier, tier_or_default
from kvfault.faults.tiers.tier import (
    ROW_KINDS,
    FaultPlans,
    Row,
    Selection,
    Tier,
    TierError,
    TierFault,
    TierOption,
    TierScenario,
    TierUnavailable,
)

__all__ = [
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
    "TierScenario",
    "TierUnavailable",
    "Tiers",
    "default_tier",
    "tier_or_default",
]
