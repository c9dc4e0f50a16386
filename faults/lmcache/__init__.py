"""The real-LMCache harness: a server on loopback, a wire proxy with faults, and the
scenarios and wire faults the campaign runs on the real tier (needs the lmcache extra)."""

from reference._lazy import lazy_exports

_EXPORTS = {
    "FiredFault": "faults.lmcache.wire_proxy",
    "LMCacheServer": "faults.lmcache.server",
    "WireFault": "faults.lmcache.wire_proxy",
    "WireProxy": "faults.lmcache.wire_proxy",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
