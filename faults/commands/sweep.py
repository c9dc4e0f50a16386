"""``kvfault sweep``: the test suite once per PYTHONHASHSEED (``kvfault.faults.sweep``),
in this process or over pytest-xdist workers and gateways."""

from __future__ import annotations

import argparse
import shlex

from kvfault.faults.argtypes import hosts_refused
from kvfault.faults.errors import UsageError


def command(args: argparse.Namespace) -> int:
    """Run pytest once per hash seed of ``--hashseeds``; print each seed's line and the sum."""
    from kvfault.faults.sweep import SweepError, format_result, format_seed, parse_seeds, sweep

    raw = list(args.pytest_args)
    if raw and raw[0] == "--":
        raw = raw[1:]
    elif raw:
        raise UsageError(f"put pytest's arguments after '--' (got {shlex.join(raw)!r})")
    try:
        seeds = parse_seeds(args.hashseeds)
    except SweepError as exc:
        raise UsageError(f"--hashseeds: {exc}") from None
    shown = shlex.join(["python", "-m", "pytest", *raw])
    print(
        f"kvfault sweep: PYTHONHASHSEED in {args.hashseeds} ({len(seeds)} seeds): {shown}",
        flush=True,
    )
    if args.tx and args.jobs is not None:
        raise UsageError("give -j or --tx, not both")
    bad_here = hosts_refused(args.tx, args.rsyncdir)
    if bad_here:
        raise UsageError(bad_here)
    result = sweep(
        seeds,
        raw,
        jobs=args.jobs,
        timeout_s=args.timeout or None,
        on_seed=lambda s: print(format_seed(s), flush=True),
        tx=args.tx,
        rsyncdirs=args.rsyncdir,
    )
    print(format_result(result, per_seed=False))
    return result.exit_code
