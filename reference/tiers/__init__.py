"""Real tiers behind ``kvfault.reference.interfaces.Tier``. Each imports its client library
only when used: ``from kvfault.reference.tiers.lmcache import LMCacheTier`` needs lmcache."""

from kvfault.reference._lazy import lazy_exports

# name -> module; both modules import neither lmcache nor torch until a tier is built.
_EXPORTS = {
    "KVLayout": "kvfault.reference.tiers.lmcache_pages",
    "LMCacheTier": "kvfault.reference.tiers.lmcache",
}
__all__ = ["KVLayout", "LMCacheTier"]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
