"""Open a tier's executor by name, through the registered tiers (``faults.tiers``): a
tier's opener is imported only when it is opened, so the in-process campaign never
imports a real tier's harness or its client library."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from faults.campaign.execute import Executor
from faults.tiers import DEFAULT_TIER, Tiers


@contextlib.contextmanager
def open_executor(
    tier: str = DEFAULT_TIER, tiers: Tiers | None = None, **options: Any
) -> Iterator[Executor]:
    """The executor of ``tier`` (of ``tiers``, default: the installed ones), with
    whatever it needs (a real server) started, and stopped again on exit.
    ``TierError`` (one line) for an unknown tier; ``TierUnavailable`` (one line) when
    it cannot start here (lmcache not installed, say)."""
    chosen = (tiers or Tiers.installed())[tier]
    with chosen.open(**options) as executor:
        yield executor
