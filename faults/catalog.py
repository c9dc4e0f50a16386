"""Every name kvfault knows, assembled here and nowhere else.

The registries themselves are plain dicts built where their entries are defined
(``SCENARIOS``, ``INJECTORS``, ``REGRESSIONS``, ``PROPERTIES``, and each tier's own);
no module adds to another's registry. Which names run on which tier, each tier says
itself (``kvfault.faults.tiers.Tier.rows``); this module answers the questions that span the
registered tiers: which names exist, and on which tier each runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from kvfault.faults.errors import KvfaultError
from kvfault.faults.tiers import ROW_KINDS, Tiers


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


def entries(kind: str, tiers: Tiers | None = None) -> dict[str, Entry]:
    """Every entry of ``kind`` (scenario, fault or regression) over ``tiers`` (default:
    the installed ones), in catalog order: tier by tier in rank order, each tier's
    rows in its own order, a name a later tier also runs extended with it."""
    if kind not in ROW_KINDS:
        raise ValueError(f"kind must be one of {', '.join(ROW_KINDS)}, got {kind!r}")
    out: dict[str, Entry] = {}
    for tier in tiers or Tiers.installed():
        for row in tier.rows(kind):
            if row.name not in out:
                out[row.name] = Entry(kind, row.name, row.description, {})
            out[row.name].scenarios[tier.name] = row.scenario
    return out


def on_tier(kind: str, tier: str, tiers: Tiers | None = None) -> list[str]:
    """The names of ``kind`` that run on ``tier``, in catalog order."""
    return [n for n, e in entries(kind, tiers).items() if tier in e.scenarios]


def resolve(kind: str, name: str, tier: str, tiers: Tiers | None = None) -> Entry:
    """The entry ``name`` of ``kind`` when it runs on ``tier``; otherwise
    ``UnknownName`` with one line that says what is wrong (misspelt, or which
    ``--tier`` it needs)."""
    known = entries(kind, tiers)
    entry = known.get(name)
    if entry is None:
        # Suggest the names of the tier asked for; any tier's when none of them is close.
        here = [n for n, e in known.items() if tier in e.scenarios]
        hint = close_matches(name, here) or close_matches(name, known)
        raise UnknownName(f"unknown {kind} {name!r}{hint}")
    if tier not in entry.scenarios:
        needs = " or ".join(f"--tier {t}" for t in entry.tiers)
        raise UnknownName(f"{kind} {name!r} runs with {needs}, not --tier {tier}")
    return entry
