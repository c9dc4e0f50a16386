"""What a tier's opener yields: an ``Executor``, which runs the campaign's scenarios on
that tier. Every hook the campaign calls is declared here, typed; a tier subclasses
it and overrides what differs."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # annotations only: reading the registry imports no simulator
    from kvfault.faults.runs import RunContext, RunResult


class Executor(abc.ABC):
    """Runs scenarios on one tier. ``tier`` names it (``kvfault.faults.tiers.Tier.name``);
    ``deterministic`` says whether the same seed must give the same trace there (then
    every case runs twice and the ``determinism`` property compares the traces);
    ``judged_by`` narrows the properties its runs are judged by (None: every property
    of the scenario)."""

    tier: ClassVar[str]
    deterministic: ClassVar[bool] = False
    judged_by: Sequence[str] | None = None

    @abc.abstractmethod
    def execute(self, scenario: str, ctx: RunContext) -> tuple[RunResult, dict[str, object]]:
        """Run ``scenario`` from ``ctx`` on this tier (the context's tier and clock are
        the executor's); return the run and notes about the tier. Whatever the run
        opened on the tier is closed before this returns."""

    def case_done(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """A case (one or more runs) is over: release what it may have left."""
