"""``kvfault run --tier atom`` and ``kvfault list --tier atom``: the tier's two commands,
called by ``faults.cli`` with its parsed arguments. Bad input: one line, exit 2."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

from faults.atom.catalog import NOT_HERE, ROWS, AtomRow, rows
from faults.atom.source import AtomSource, AtomSourceMissing


def _bad(message: str) -> int:
    print(f"kvfault: error: {message}", file=sys.stderr)
    return 2


def _refused(args: Any) -> str | None:
    """The first flag ``--tier atom`` does not take, as one line."""
    if getattr(args, "regression", None):
        return "--tier atom runs no planted regressions (kvfault list --tier atom says why)"
    if getattr(args, "swarm", False):
        return "--swarm draws in-process injectors: it runs on --tier memory"
    if getattr(args, "scale", 1) != 1:
        return "--scale is for the simulated tier; --tier atom runs at scale 1"
    if getattr(args, "tx", None) or getattr(args, "numprocesses", None) not in (None, "0"):
        return "--tier atom runs its servers on this host: drop -n/--tx"
    if getattr(args, "jobs", None) not in (None, "auto", 1):
        return "--tier atom runs one host at a time: drop -j"
    if getattr(args, "report", None) is not None or getattr(args, "budget", None) is not None:
        return "--tier atom writes no --report and takes no --budget yet"
    return None


def judged_by(chosen: list[AtomRow], names: list[str]) -> list[AtomRow]:
    """The rows judged by ``names`` only (in the rows' own order of properties).
    ``KeyError`` with one line for a name that is no property, or that some row is
    not judged by."""
    from faults.properties.checks import PROPERTIES

    for name in names:
        if name not in PROPERTIES:
            raise KeyError(f"--property {name!r} is no property; known: {', '.join(PROPERTIES)}")
        for row in chosen:
            if name not in row.properties:
                raise KeyError(f"--property {name!r}: {row.name} is not judged by it")
    return [replace(r, properties=tuple(p for p in r.properties if p in names)) for r in chosen]


def run_command(args: Any) -> int:
    """The atom campaign over ``--first-seed``/``--seeds``, rows from ``--scenario`` and
    ``--fault`` (all when neither is given), judged by ``--property`` (all when not
    given). Prints the table; exit 0 when every row
    passed, 1 when one failed, 2 when one proved nothing."""
    refused = _refused(args)
    if refused:
        return _bad(refused)
    try:
        source = AtomSource.find(getattr(args, "atom_src", None))
    except AtomSourceMissing as e:
        return _bad(str(e))
    names = list(getattr(args, "scenario", None) or []) + list(getattr(args, "fault", None) or [])
    try:
        chosen = rows(names)
    except KeyError as e:
        return _bad(f"{e.args[0]}; see `kvfault list --tier atom`")
    judged = getattr(args, "property", None)
    if judged:
        try:
            chosen = judged_by(chosen, judged)
        except KeyError as e:
            return _bad(e.args[0])
    from faults.atom.campaign import atom_campaign, campaign_exit, table
    from faults.atom.zygote import ZygoteError

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    quiet = getattr(args, "no_progress", False)

    def progress(o: Any) -> None:
        if not quiet:
            print(f"  {o.row.name}: {o.verdict}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    try:
        with atom_campaign(source, hash_seed=seeds[0]) as campaign:
            outcomes = campaign.run(chosen, seeds, progress)
    except ZygoteError as e:
        return _bad(str(e))
    print(table(outcomes, seeds))
    failed = sum(1 for o in outcomes if not o.verdict.ok)
    print(
        f"\natom tier at {source.path}: {len(outcomes)} rows, {len(outcomes) * len(seeds)} runs: "
        f"{len(outcomes) - failed} ok, {failed} failed in {time.perf_counter() - t0:.1f}s wall"
    )
    return campaign_exit(outcomes)


def list_command(args: Any) -> int:
    """What runs with ``--tier atom``: its scenarios and faults, the properties each is
    judged by, and why the rest of kvfault's catalog does not apply."""
    from faults.properties.checks import PROPERTIES

    show_all = not any(
        getattr(args, k, False) for k in ("scenarios", "properties", "faults", "regressions")
    )
    if show_all or args.scenarios:
        print("scenarios (--tier atom):")
        for r in ROWS.values():
            if r.kind == "scenario":
                print(f"  {r.name}  {r.description} [{', '.join(r.properties)}]")
    if show_all or args.faults:
        print("faults (--tier atom):")
        for r in ROWS.values():
            if r.kind == "fault":
                print(f"  {r.name}  {r.description} (on {r.scenario}) [{', '.join(r.properties)}]")
    if show_all or args.properties:
        used = {p for r in ROWS.values() for p in r.properties}
        print("properties (--tier atom):")
        for p in PROPERTIES:
            if p in used:
                doc = " ".join((PROPERTIES[p].__doc__ or "").split()).split(". ")[0]
                print(f"  {p}  {doc}")
    if show_all or args.regressions:
        print("not on --tier atom:")
        for what, why in NOT_HERE.items():
            print(f"  {what}: {why}")
    return 0


class Commands:
    """The tier's own commands, as its ``Tier.commands`` names them."""

    run = staticmethod(run_command)
    list = staticmethod(list_command)
