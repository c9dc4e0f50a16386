"""Real tiers behind ``reference.interfaces.Tier``. Each imports its client library
only when used: ``from reference.tiers.lmcache import LMCacheTier`` needs lmcache."""

from typing import Any

__all__ = ["KVLayout", "LMCacheTier"]


def __getattr__(name: str) -> Any:
    # Lazy: `import reference.tiers` must not pull lmcache or torch.
    if name in __all__:
        from reference.tiers import lmcache

        return getattr(lmcache, name)
    raise AttributeError(f"module 'reference.tiers' has no attribute {name!r}")
