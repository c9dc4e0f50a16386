"""Open a tier's executor by name, through the registered tiers (``kvfault.faults.tiers``): a
tier's opener is imported only when it is opened, so the in-process campaign never
imports a real tier's harness or its client library. A worker (forked, or
pytest-xdist's) opens the tier its cases run on the same way (``Opened``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from kvfault.faults.tiers import Executor, Tiers


@contextlib.contextmanager
def open_executor(
    tier: str | None = None, tiers: Tiers | None = None, **options: Any
) -> Iterator[Executor]:
    """The executor of ``tier`` (of ``tiers``, default: the installed ones; no
    ``tier``: their default), with
    whatever it needs (a real server) started, and stopped again on exit.
    ``TierError`` (one line) for an unknown tier; ``TierUnavailable`` (one line) when
    it cannot start here (lmcache not installed, say)."""
    known = tiers or Tiers.installed()
    chosen = known[tier] if tier is not None else known.default
    with chosen.open(**options) as executor:
        yield executor


class Opened:
    """The executors a worker has opened, by tier and the tier's own options as a
    target records them (``--FLAG VALUE`` words): each opened when a case first needs it,
    all closed by ``close`` (or on leaving a ``with`` block), however the worker ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._open: dict[tuple[str, tuple[str, ...]], Executor] = {}

    def executor(self, tier: str, options: Sequence[str] = ()) -> Executor:
        """The executor of ``tier`` opened with ``options`` (command-line words)."""
        key = (tier, tuple(options))
        if key not in self._open:
            declared = Tiers.installed()[tier]
            opened = declared.open(**declared.opener_options(options))
            self._open[key] = self._stack.enter_context(opened)
        return self._open[key]

    def close(self) -> None:
        self._stack.close()
        self._open.clear()

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
