"""The ``lmcache`` tier's declaration (entry point ``kvfault.tiers: lmcache``): the
reference stack with a real lmcache server on 127.0.0.1, in real time, under wire
faults. Reading it imports nothing of lmcache or torch."""

from __future__ import annotations

from faults.tiers.tier import Row, Tier

NAME = "lmcache"


def rows() -> list[Row]:
    """The scenarios that name this tier, its wire faults, and the planted regressions
    that show here (each on its real-tier size)."""
    from faults.lmcache.wire_faults import WIRE_FAULTS
    from faults.regressions.legacy import REGRESSIONS
    from faults.scenarios import SCENARIOS

    out = [
        Row("scenario", s.name, s.description, s.name)
        for s in SCENARIOS.values()
        if NAME in s.tiers
    ]
    out += [Row("fault", w.name, w.description, w.scenario) for w in WIRE_FAULTS.values()]
    out += [
        Row("regression", r.name, r.description, r.lmcache_scenario)
        for r in REGRESSIONS.values()
        if r.lmcache_scenario is not None
    ]
    return out


TIER = Tier(
    name=NAME,
    description="a real lmcache server on 127.0.0.1, in real time, with wire faults "
    "(needs the lmcache extra: pip install -c constraints/ci.txt '.[lmcache]')",
    opener="faults.lmcache.executor:lmcache_executor",
    catalog="faults.lmcache.tier:rows",
    faults="faults.lmcache.wire_faults:WIRE_FAULTS",
    rank=10,
)
