"""Real tiers behind ``reference.interfaces.Tier``. Each imports its client library
only when used: ``from reference.tiers.lmcache import LMCacheTier`` needs lmcache."""

from importlib import import_module
from typing import Any

# name -> module; both modules import neither lmcache nor torch until a tier is built.
_EXPORTS = {
    "KVLayout": "reference.tiers.lmcache_pages",
    "LMCacheTier": "reference.tiers.lmcache",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy: `import reference.tiers` must not pull lmcache or torch.
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reference.tiers' has no attribute {name!r}")
