"""The real-LMCache harness: a server on loopback, a wire proxy with faults, and the
scenarios and wire faults the campaign runs on the real tier (needs the lmcache extra)."""

from kvfault.reference._lazy import lazy_exports

_EXPORTS = {
    "FiredFault": "kvfault.faults.lmcache.wire_proxy",
    "LMCacheServer": "kvfault.faults.lmcache.server",
    "WireFault": "kvfault.faults.lmcache.wire_proxy",
    "WireProxy": "kvfault.faults.lmcache.wire_proxy",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
