"""``kvfault list``: every runnable name (scenarios, properties, faults, planted
regressions) and the registered tiers, with the tiers each name runs on; ``--tier
NAME`` lists only what runs on that tier (one with its own list, atom, hands over to
it)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvfault.faults.catalog import Entry


def command(args: argparse.Namespace) -> int:
    """Print the lists the arguments ask for (all of them by default); exit 0."""
    from kvfault.faults.tiers import Tiers

    tiers = Tiers.installed()
    own = tiers[args.tier].own_listing() if args.tier else None
    default = tiers.default.name
    if own is not None:
        return int(own(args))
    from kvfault.faults.catalog import entries
    from kvfault.faults.properties.checks import PROPERTIES
    from kvfault.faults.properties.names import Prop

    def first_line(text: str | None) -> str:
        # A docstring's first sentence, on one line.
        flat = " ".join((text or "").split())
        return flat.split(". ")[0].rstrip(".")

    def where(e: Entry) -> str:
        # Which tiers a name runs on (the default tier needs no flag), and where.
        parts = []
        for tier, scenario in e.scenarios.items():
            on = "" if e.kind == "scenario" else f" {scenario}"
            parts.append(f"on{on}" if tier == default else f"--tier {tier}{on and ':'}{on}")
        others = [t for t in e.tiers if t != default]
        if e.kind == "scenario" and len(parts) == 1 and others:
            parts = [f"--tier {others[0]} only"]
        elif e.kind == "scenario":
            parts = [f"also --tier {t}" for t in others]
        return f" [{'; '.join(parts)}]" if parts else ""

    from kvfault.faults.regressions.legacy import REGRESSIONS
    from kvfault.faults.scenarios import SCENARIOS

    def grows(e: Entry) -> str:
        # What --scale K multiplies, for a scenario that has a size.
        scenario = SCENARIOS.get(e.name)
        return f" [--scale K: {scenario.scales}]" if scenario and scenario.scales else ""

    def regression_line(e: Entry) -> str:
        return f"{e.description}{where(e)[:-1]}; caught by {REGRESSIONS[e.name].signature}]"

    def on_tier(kind: str) -> list[Entry]:
        # With --tier NAME, only what runs on that tier.
        return [e for e in entries(kind).values() if args.tier is None or args.tier in e.tiers]

    sections = {
        "scenarios": [
            (e.name, f"{e.description}{where(e)}{grows(e)}") for e in on_tier("scenario")
        ],
        "properties": [(n, first_line(fn.__doc__)) for n, fn in PROPERTIES.items()]
        + [(Prop.DETERMINISM, "the same seed gives the same trace digest")],
        "faults": [(e.name, f"{e.description}{where(e)}") for e in on_tier("fault")],
        "regressions": [(e.name, regression_line(e)) for e in on_tier("regression")],
        "tiers": [(t.name, t.description) for t in tiers],
    }
    chosen = [name for name in sections if getattr(args, name)] or list(sections)
    headed = len(chosen) > 1  # one list alone is one name per line; several say which is which
    for name in chosen:
        rows = sections[name]
        width = max(len(n) for n, _ in rows) + 2 if rows else 0
        indent = "  " if headed else ""
        if headed:
            print(f"{name}:")
        for n, desc in rows:
            print(f"{indent}{n.ljust(width)}{desc}".rstrip())
    return 0
