"""Every name kvfault knows, assembled here and nowhere else.

The registries themselves are plain dicts built where their entries are defined
(``SCENARIOS``, ``INJECTORS``, ``WIRE_FAULTS``, ``REGRESSIONS``, ``PROPERTIES``); no
module adds to another's registry. This module answers the questions that span them:
which names exist, and on which tier each runs (``memory``: the in-process tier in
virtual time; ``lmcache``: a real lmcache server in real time).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from faults.errors import KvfaultError

TIERS = ("memory", "lmcache")
KINDS = ("scenario", "fault", "regression")


class UnknownName(KvfaultError, ValueError):
    """A name that is not in the catalog, or not on the tier asked for: one line."""


@dataclass(frozen=True)
class Entry:
    """One runnable name: its kind, one-line description, and per tier the scenario it
    runs on there."""

    kind: str
    name: str
    description: str
    scenarios: dict[str, str]  # tier -> scenario

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(self.scenarios)


def close_matches(name: str, known: Iterable[str]) -> str:
    """`` (did you mean: a, b?)`` for a misspelt name, or an empty string."""
    known = list(known)
    hits = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if not hits:
        # A substring is a close match too: `kvfault repro hash` finds the hash-order one.
        hits = [k for k in known if name.lower() in k.lower()][:3]
    return f" (did you mean: {', '.join(hits)}?)" if hits else ""


def entries(kind: str) -> dict[str, Entry]:
    """Every entry of ``kind`` (scenario, fault or regression), in catalog order."""
    from faults.injectors.plans import INJECTORS
    from faults.lmcache.wire_faults import WIRE_FAULTS
    from faults.regressions.legacy import REGRESSIONS
    from faults.scenarios.catalog import SCENARIOS

    if kind == "scenario":
        out = [
            Entry(kind, s.name, s.description, {t: s.name for t in s.tiers})
            for s in SCENARIOS.values()
        ]
    elif kind == "fault":
        out = [
            Entry(kind, i.name, i.description, {"memory": i.scenario}) for i in INJECTORS.values()
        ]
        out += [
            Entry(kind, w.name, w.description, {"lmcache": w.scenario})
            for w in WIRE_FAULTS.values()
        ]
    elif kind == "regression":
        out = []
        for r in REGRESSIONS.values():
            on = {"memory": r.scenario}
            if r.lmcache_scenario is not None:
                on["lmcache"] = r.lmcache_scenario
            out.append(Entry(kind, r.name, r.description, on))
    else:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return {e.name: e for e in out}


def on_tier(kind: str, tier: str) -> list[str]:
    """The names of ``kind`` that run on ``tier``, in catalog order."""
    return [n for n, e in entries(kind).items() if tier in e.scenarios]


def resolve(kind: str, name: str, tier: str) -> Entry:
    """The entry ``name`` of ``kind`` when it runs on ``tier``; otherwise
    ``UnknownName`` with one line that says what is wrong (misspelt, or which
    ``--tier`` it needs)."""
    known = entries(kind)
    entry = known.get(name)
    if entry is None:
        raise UnknownName(f"unknown {kind} {name!r}{close_matches(name, known)}")
    if tier not in entry.scenarios:
        needs = " or ".join(f"--tier {t}" for t in entry.tiers)
        raise UnknownName(f"{kind} {name!r} runs with {needs}, not --tier {tier}")
    return entry
