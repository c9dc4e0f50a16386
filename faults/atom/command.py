"""The ``atom`` tier's command-line edges: what ``kvfault run --tier atom`` refuses
before it runs (``refused``, its ``Tier.refuses``) and ``kvfault list --tier atom``
(``list_command``, its ``Tier.listing``). Bad input: one line, exit 2."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvfault.faults.atom.catalog import DROPPED, LONG_MATRIX, NOT_HERE, ROWS, AtomRow
from kvfault.faults.tiers import Selection


def refused(selection: Selection) -> str | None:
    """What ``--tier atom`` cannot run of ``selection``, as one line: a row the tier
    dropped (with why), an ``--atom-fix`` that is no fix, a ``--property`` that is no
    property or that a chosen row is not judged by. Other names that are no row of the
    tier (a planted regression) are the campaign's to answer, with the tier they run on."""
    from kvfault.faults.atom.fixes import fixes

    for kind, asked in (("scenario", selection.scenarios), ("fault", selection.faults)):
        for name in asked:
            if name in DROPPED:
                return f"{kind} {name!r} does not run with --tier atom{_elsewhere(kind, name)}: {DROPPED[name]}"
    try:
        fixes(tuple(selection.options.get("atom_fix") or ()))
    except KeyError as e:
        return str(e.args[0])
    if schedules_of(selection.options.get("atom_schedules")) == 0:
        value = selection.options.get("atom_schedules")
        return f"--atom-schedules takes a whole number from 1 to 20, not {value!r}"
    if tp_of(selection.options.get("atom_tp")) == 0:
        value = selection.options.get("atom_tp")
        return f"--atom-tp takes 1 or 2 (the tier's model has 2 KV heads), not {value!r}"
    if pp_of(selection.options.get("atom_pp")) == 0:
        value = selection.options.get("atom_pp")
        return f"--atom-pp takes 1 or 2 (the tier's model has 2 layers), not {value!r}"
    judged = selection.options.get("property")
    if not judged:
        return None
    names = [*selection.scenarios, *selection.faults]
    chosen = [ROWS[n] for n in names if n in ROWS] if names else list(ROWS.values())
    try:
        judged_by(chosen, judged)
    except KeyError as e:
        return str(e.args[0])
    return None


def _elsewhere(kind: str, name: str) -> str:
    """Which installed tiers run ``name`` (`` (it runs with --tier memory)``), or ''."""
    from kvfault.faults.tiers import Tiers

    on = [t.name for t in Tiers.installed() if any(r.name == name for r in t.rows(kind))]
    return " (it runs with " + " or ".join(f"--tier {n}" for n in on) + ")" if on else ""


def schedules_of(value: object) -> int | None:
    """``--atom-schedules``'s value as a count (None: not given; 0: not a count from 1
    to 20, which ``refused`` answers in one line)."""
    if value is None:
        return None
    try:
        n = int(str(value))
    except ValueError:
        return 0
    return n if 1 <= n <= 20 else 0


def tp_of(value: object) -> int | None:
    """``--atom-tp``'s value as a TP size (None: not given; 0: not 1 or 2, which
    ``refused`` answers in one line): the tier's model has 2 KV heads to split."""
    if value is None:
        return None
    return {"1": 1, "2": 2}.get(str(value).strip(), 0)


def pp_of(value: object) -> int | None:
    """``--atom-pp``'s value as a count of pipeline stages (None: not given; 0: not 1 or
    2, which ``refused`` answers in one line): the tier's model has 2 layers to split."""
    if value is None:
        return None
    return {"1": 1, "2": 2}.get(str(value).strip(), 0)


def judged_by(chosen: list[AtomRow], names: list[str]) -> list[AtomRow]:
    """The rows judged by ``names`` only (in the rows' own order of properties).
    ``KeyError`` with one line for a name that is no property, or that some row is
    not judged by."""
    from kvfault.faults.properties.checks import PROPERTIES

    for name in names:
        if name not in PROPERTIES:
            raise KeyError(f"--property {name!r} is no property; known: {', '.join(PROPERTIES)}")
        for row in chosen:
            if name not in row.properties:
                raise KeyError(f"--property {name!r}: {row.name} is not judged by it")
    return [replace(r, properties=tuple(p for p in r.properties if p in names)) for r in chosen]


def set_of(name: str) -> str:
    """Which set row ``name`` is in, as ``kvfault list --tier atom`` says it: ``default``
    or ``full`` with the default row that runs its class."""
    if name in LONG_MATRIX:
        return f"full (by default its class runs as {LONG_MATRIX[name]})"
    return "default"


def list_command(args: Any) -> int:
    """What runs with ``--tier atom``: its scenarios and faults, the properties each is
    judged by, and why the rest of kvfault's catalog does not apply."""
    from kvfault.faults.atom.at_main import at_main
    from kvfault.faults.atom.row_config import configuration, tier_settings
    from kvfault.faults.tiers.listing import print_not_here, print_properties, shows_all

    show_all = shows_all(args)

    def runs(r: AtomRow) -> str:
        schedules = f"; {r.schedules} schedules a case" if r.schedules > 1 else ""
        return (
            f"      runs: {configuration(r)}{schedules}\n      set: {set_of(r.name)}\n"
            f"      at ATOM's main: {at_main(r.name).line()}"
        )

    if show_all or args.scenarios or args.faults:
        print(f"every row runs, unless its own line says otherwise: {tier_settings()}")
        default = len([n for n in ROWS if n not in LONG_MATRIX])
        print(f"sets: {default} rows run by default, {len(LONG_MATRIX)} more with --full; "
              "a row named runs in either")  # fmt: skip
    if show_all or args.scenarios:
        print("scenarios (--tier atom):")
        for r in ROWS.values():
            if r.kind == "scenario":
                print(f"  {r.name}  {r.description} [{', '.join(r.properties)}]")
                print(runs(r))
    if show_all or args.faults:
        print("faults (--tier atom):")
        for r in ROWS.values():
            if r.kind == "fault":
                print(f"  {r.name}  {r.description} (on {r.scenario}) [{', '.join(r.properties)}]")
                print(runs(r))
    if show_all or args.properties:
        print_properties("atom", {p for r in ROWS.values() for p in r.properties})
    if show_all or args.faults:
        from kvfault.faults.atom.fixes import FIXES

        print("candidate fixes of ATOM (--atom-fix NAME, named for the finding's row):")
        for f in FIXES.values():
            print(f"  {f.name}  {f.description} [{f.target}]")
    if show_all or args.regressions:
        print_not_here("atom", NOT_HERE)
    if show_all or getattr(args, "tiers", False):
        from kvfault.faults.tiers import Tiers

        print("tiers:")
        for t in Tiers.installed():
            print(f"  {t.name}  {t.description}")
    return 0
