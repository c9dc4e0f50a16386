"""The tiers a campaign runs on, by name, each opened lazily by module path (so the
in-process campaign never imports the real-tier harness or its client library)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

from faults.campaign.execute import Executor, MemoryExecutor

# tier -> "module:function" of a context manager that yields its executor
_OPENERS = {
    "lmcache": "faults.lmcache.executor:lmcache_executor",
}


@contextlib.contextmanager
def open_executor(tier: str = "memory") -> Iterator[Executor]:
    """The executor of ``tier``, with whatever it needs (a real server) started, and
    stopped again on exit. ``ValueError`` (one line) for an unknown tier; the tier's
    own one-line error when it cannot start (lmcache not installed, say)."""
    if tier == "memory":
        yield MemoryExecutor()
        return
    if tier not in _OPENERS:
        known = ", ".join(["memory", *_OPENERS])
        raise ValueError(f"unknown tier {tier!r}; known: {known}")
    module, _, fn = _OPENERS[tier].partition(":")
    opener = getattr(importlib.import_module(module), fn)
    with opener() as executor:
        yield executor
