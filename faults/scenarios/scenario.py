"""What a scenario declares: its name, how to run it, the properties judged over its
trace, what grows with the run's scale and how the fixed stack must end it; and the
property sets the scenarios share. Which tiers run it is each tier's own catalog's
business (``kvfault.faults.tiers.Tier.catalog``): a scenario names no tier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import Expect, RunContext, RunResult


@dataclass(frozen=True)
class Scenario:
    """A named workload: ``run`` builds and runs it from a context; ``properties`` are
    checked over its trace."""

    name: str
    description: str
    run: Callable[[RunContext], RunResult]
    properties: tuple[str, ...]
    # What grows with ``RunContext.scale`` (K); empty: the scenario has a fixed size.
    scales: str = ""
    # How the fixed stack must end a run of it (run to the end, stop with a named
    # error on a named operation within a bound, or refuse to start); every entry
    # declares one, and the campaign fails any other ending.
    expect: Expect | None = None


_TRACE = (
    Prop.CORRECTNESS,
    Prop.KEYS,
    Prop.NO_FALSE_STOP,
    Prop.LIVENESS,
    Prop.EXACTLY_ONCE,
    Prop.RESOURCES,
    Prop.HBM_OWNERS,
)
_ALL = (*_TRACE, Prop.DETERMINISM)
# Runs whose engines share one tier also judge what they loaded (two servers each
# have their own tier: a prompt stored on one is rightly a miss on the other).
_ONE_TIER = (*_TRACE, Prop.EFFICIENCY, Prop.LOAD_FAILURES, Prop.DETERMINISM)
