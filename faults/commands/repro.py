"""``kvfault repro NAME`` and ``kvfault replay ARTIFACT``: one case run again and
judged, with its verdict, replay artifact and, on request, its timeline picture."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kvfault.faults.argtypes import DEFAULT_CASE_TIMEOUT_S, dir_refused
from kvfault.faults.errors import KvfaultError, UsageError


def repro_command(args: argparse.Namespace) -> int:
    """Run planted regression NAME legacy vs fixed on one seed and print the verdict."""
    from kvfault.faults.campaign import CampaignError, Case, regression_target
    from kvfault.faults.campaign.artifacts import artifact_dir
    from kvfault.faults.repro import format_reproduction, reproduce

    try:
        target = regression_target(args.name)
    except CampaignError as exc:
        raise UsageError(f"{exc}; see `kvfault list --regressions`") from None
    why = _timeline_refused(args.timeline) or dir_refused(
        artifact_dir(args.artifacts), "--artifacts" if args.artifacts else "the artifact directory"
    )
    if why:
        raise UsageError(why)
    rep = reproduce(Case(target, args.seed), artifact_dir(args.artifacts), args.timeout)
    print(format_reproduction(rep))
    return _timeline(args.timeline, rep.outcome, rep.exit_code)


def replay_command(args: argparse.Namespace) -> int:
    """Run the case a replay artifact names again, as it ran, and print the verdict."""
    from kvfault.faults.campaign.artifacts import hashseed, read_artifact
    from kvfault.faults.repro import format_reproduction, reproduce

    case, obj = read_artifact(args.artifact)
    why = _timeline_refused(args.timeline)
    if why:
        raise UsageError(why)
    if case.recorded is not None:
        from dataclasses import replace

        drawn = replace(case, recorded=None).plan()
        if drawn is None or drawn.as_json() != case.recorded.as_json():
            print(
                "kvfault: note: the artifact's fault plan is not the one its target draws "
                "now; replaying the artifact's plan, which its command line would not run",
                file=sys.stderr,
            )
    if "code" in obj:
        from kvfault.faults.campaign.artifacts import case_code
        from kvfault.faults.provenance import Code

        then, now = Code.from_json(obj["code"]), case_code(case)
        why = then.differs(now) if now is not None else f"recorded at {then.describe()}"
        if why:
            print(
                f"kvfault: note: this replay runs other code than the artifact's case: {why}",
                file=sys.stderr,
                flush=True,
            )
    recorded = obj.get("pythonhashseed")
    if recorded is not None and str(recorded) != str(hashseed()):
        print(
            f"kvfault: note: recorded under PYTHONHASHSEED={recorded}, running under "
            f"{hashseed() or 'a random one'}; for the same hash order run "
            f"PYTHONHASHSEED={recorded} kvfault replay {args.artifact}",
            file=sys.stderr,
        )
    # The artifact exists already: replay must not rewrite it. A case that ran past a
    # --timeout is replayed under that bound, unless --timeout says otherwise.
    timeout = args.timeout
    if timeout is None:
        timeout = obj.get("timeout_s") or DEFAULT_CASE_TIMEOUT_S
    rep = reproduce(case, None, timeout)
    rep.artifact = args.artifact
    print(format_reproduction(rep))
    return _timeline(args.timeline, rep.outcome, rep.exit_code)


def _timeline_refused(path: Path | None) -> str | None:
    """Why ``--timeline PATH`` cannot be written, checked before the case runs: an
    extension that names no picture format, no matplotlib, or a place that cannot
    hold the file."""
    if path is None:
        return None
    import importlib.util

    from kvfault.faults.report.timeline import PLOT_HINT, picture_format

    try:
        picture_format(path)
    except ValueError as exc:
        return f"--timeline: {exc}"
    if importlib.util.find_spec("matplotlib") is None:
        return f"--timeline needs matplotlib; {PLOT_HINT}"
    if path.is_dir():
        return f"--timeline: {path} is a directory"
    parent = path.parent
    if not parent.is_dir():  # a missing directory is a typo: never created
        what = "is not a directory" if parent.exists() else "does not exist"
        return f"--timeline {path}: directory {parent} {what}"
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"--timeline: {path} is not writable"
    return None


def _timeline(path: Path | None, outcome: Any, code: int) -> int:
    """Draw the picture when asked; a picture that could not be written is an error
    (one line on stderr, exit 2) after the verdict, which stands as printed."""
    if path is None:
        return code
    from kvfault.faults.repro import write_timeline

    why = write_timeline(outcome, path)
    if why is not None:
        raise KvfaultError(f"--timeline {path}: {why}")
    print(f"timeline: {path}")
    return code
