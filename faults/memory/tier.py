"""The ``memory`` tier's declaration (entry point ``kvfault.tiers: memory``): the
reference stack on the in-process tier in virtual time. It registers like any outside
tier; it is the default because it ranks first (``rank=0``: ``Tiers.default``). Reading
it imports nothing of the tier (its executor is ``kvfault.faults.memory.executor``)."""

from __future__ import annotations

from kvfault.faults.tiers import Row, Tier

NAME = "memory"  # as faults.memory.executor names it


def rows() -> list[Row]:
    """Every shared scenario but the real-tier sizes (this tier runs the full-size
    stories they shrink), every in-process injector on its scenario, every planted
    regression on its scenario."""
    from kvfault.faults.injectors.catalog import INJECTORS
    from kvfault.faults.regressions.legacy import REGRESSIONS
    from kvfault.faults.scenarios import SCENARIOS
    from kvfault.faults.scenarios.real_sized import REAL_SIZED

    out = [
        Row("scenario", s.name, s.description, s.name)
        for s in SCENARIOS.values()
        if s.name not in REAL_SIZED
    ]
    out += [Row("fault", i.name, i.description, i.scenario) for i in INJECTORS.values()]
    out += [Row("regression", r.name, r.description, r.scenario) for r in REGRESSIONS.values()]
    return out


TIER = Tier(
    name=NAME,
    description="the embedded in-process tier in virtual time (the default)",
    executor="kvfault.faults.memory.executor:MemoryExecutor",
    catalog="kvfault.faults.memory.tier:rows",
    rank=0,
    fault_plans="kvfault.faults.memory.plans:PLANS",
    parallel=True,
    scales=True,
    source="kvfault",
)
