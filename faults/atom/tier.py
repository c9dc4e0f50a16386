"""The ``atom`` tier's declaration (entry point ``kvfault.tiers: atom``): ATOM's real
scheduler and offload connector from an ATOM checkout, with a real lmcache engine
(docs/atom/tier.md). It keeps its own rows and campaign loop (``faults.atom.command``)
until the one campaign loop runs it. Reading it imports nothing of ATOM, lmcache or
torch."""

from __future__ import annotations

from faults.tiers.tier import Tier

TIER = Tier(
    name="atom",
    description="ATOM's real scheduler and offload connector from --atom-src, with a real "
    "lmcache engine (needs the lmcache and atom extras)",
    commands="faults.atom.command:Commands",
    rank=20,
    seeds=1,
)
