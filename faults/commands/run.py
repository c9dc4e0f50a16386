"""``kvfault run``: the campaign, from parsed arguments to the table, the reports and
the exit status. The loop itself is the session's (``kvfault.faults.campaign.session``): this
module picks the targets, the seeds and the backend, and renders what came back."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvfault.faults.argtypes import dir_refused, hosts_refused, seeds_refused
from kvfault.faults.errors import KvfaultError, UsageError, report

if TYPE_CHECKING:
    from kvfault.faults.campaign import CampaignResult, Target
    from kvfault.faults.campaign.artifacts import CampaignArtifacts

# Seeds per target in a plain `kvfault run`: the whole default campaign aims at 10 s on
# 2 cores; it takes about 7.5 CPU seconds, spread over the cores (-j; docs/scale.md,
# benchmarks/bench_scale.py and bench_campaign.py).
DEFAULT_SEEDS = 2


def refused(args: argparse.Namespace) -> str | None:
    """What the options given together cannot mean, in one line (each value alone is
    checked by its argument type, ``kvfault.faults.argtypes``): an option another tier
    declares (``kvfault.faults.tiers.TierOption``), what the chosen tier cannot run (its
    capabilities, its own ``Tier.refused``)."""
    from kvfault.faults.tiers import Selection, Tiers

    bad_here = seeds_refused(args.first_seed, args.seeds, args.budget) or hosts_refused(
        args.tx, args.rsyncdir
    )
    if bad_here:
        return bad_here
    tiers = Tiers.installed()
    on = tiers[args.tier]
    mine = {opt.flag for opt in on.options}
    for tier in tiers:
        for opt in tier.options:
            if opt.flag not in mine and getattr(args, opt.dest, None) not in (None, []):
                return opt.elsewhere or f"{opt.flag} is for --tier {tier.name}"
    if not on.parallel and (
        args.numprocesses not in (None, "0") or args.tx or args.jobs not in (None, "auto", 1)
    ):
        return f"--tier {on.name} runs in one process: drop -n/--tx/-j"
    if not on.scales and args.scale != 1:
        return f"--scale is for the simulated tier; --tier {on.name} runs at scale 1"
    return on.refused(
        Selection(
            scenarios=tuple(args.scenario or ()),
            faults=tuple(args.fault or ()),
            regressions=tuple(args.regression or ()),
            options={o.dest: getattr(args, o.dest, None) for o in on.options},
        )
    )


def default_seed_count(tier: str) -> int:
    """How many seeds per target ``kvfault run --tier TIER`` runs without ``--seeds``:
    the tier's declared count, else ``DEFAULT_SEEDS``."""
    from kvfault.faults.tiers import Tiers

    return Tiers.installed()[tier].seeds or DEFAULT_SEEDS


def add_tier_options(parser: argparse.ArgumentParser) -> None:
    """Each option a registered tier declares (``kvfault.faults.tiers.TierOption``), once, with
    the tier named in its help, and ``--tier``'s default, the default tier
    (``kvfault.faults.tiers.Tiers.default``): ``kvfault run``'s parser adds them when it
    first parses."""
    from kvfault.faults.tiers import Tiers

    tiers = Tiers.installed()
    parser.set_defaults(tier=tiers.default.name)
    seen: set[str] = set()
    for tier in tiers:
        for opt in tier.options:
            if opt.flag in seen:
                continue
            seen.add(opt.flag)
            parser.add_argument(opt.flag, dest=opt.dest, default=None, metavar=opt.metavar,
                                action="append" if opt.repeat else "store",
                                help=f"with --tier {tier.name}: {opt.help}")  # fmt: skip


def tier_options(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the chosen tier's own options, by the keyword its opener takes."""
    from kvfault.faults.tiers import Tiers

    return {opt.dest: getattr(args, opt.dest, None) for opt in Tiers.installed()[args.tier].options}


def tier_words(args: argparse.Namespace) -> list[str]:
    """The chosen tier's own options as command-line words (a replay command repeats
    them): as given, except that a path is made absolute, and the checkout under test
    that only its environment variable named (``KVFAULT_ATOM_SRC``) is written out, so
    the replay line runs the same checkout from any directory and any environment."""
    import os

    from kvfault.faults.tiers import Tiers

    words: list[str] = []
    for opt in Tiers.installed()[args.tier].options:
        value = getattr(args, opt.dest, None)
        if value is None and opt.env and os.environ.get(opt.env, "").strip():
            value = os.environ[opt.env]
        for v in (value or []) if opt.repeat else ([] if value is None else [value]):
            if opt.path and str(v).strip():
                v = os.path.abspath(os.path.expanduser(str(v)))
            words += [opt.flag, str(v)]
    return words


def command(args: argparse.Namespace) -> int:
    """Run the campaign the arguments name; print its table; write its reports."""
    from dataclasses import replace

    from kvfault.faults.campaign import CampaignError, select_targets
    from kvfault.faults.campaign.artifacts import CampaignArtifacts, artifact_dir
    from kvfault.faults.campaign.backends import open_backend
    from kvfault.faults.campaign.outcomes import CampaignFailure
    from kvfault.faults.campaign.session import INTERRUPTS, Session, interrupted_by, run_session
    from kvfault.faults.report.progress import progress_mode, show
    from kvfault.faults.tiers import default_tier
    from kvfault.faults.verdicts import Verdict
    from kvfault.reference.signals import stop_signals_held

    if args.tier is None:
        args.tier = default_tier()
    if args.seeds is None:
        args.seeds = default_seed_count(args.tier)
    why = refused(args)
    if why:
        raise UsageError(why)
    try:
        targets = select_targets(
            args.regression, args.fault, args.scenario, args.swarm, args.pin, args.scale,
            tier=args.tier, stack=args.legacy, options=tier_words(args), full=args.full,
        )  # fmt: skip
    except CampaignError as exc:
        raise UsageError(f"{exc}; see `kvfault list`") from None
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.artifacts is None and args.report is not None:
        args.artifacts = args.report / "artifacts"
    if args.tx and args.numprocesses is not None:
        raise UsageError("give -n or --tx, not both")
    if args.scale != 1:
        targets, why = _scaled(targets, args.scale)
        if why:
            raise UsageError(why)
    if args.jobs is not None and (args.tx or args.numprocesses is not None):
        raise UsageError("give -j (processes here) or -n/--tx (pytest-xdist workers), not both")
    for path, flag in ((args.report, "--report"), (artifact_dir(args.artifacts), "--artifacts")):
        why = dir_refused(path, flag) if path is not None else None
        if why:
            raise UsageError(why)
    store = CampaignArtifacts(artifact_dir(args.artifacts))
    mode = progress_mode(args.no_progress)
    reported: list[CampaignResult] = []
    ended: list[CampaignResult] = []  # run_session's result, once every case has ended

    def interrupted(cut: CampaignResult) -> None:
        # Ctrl-C or a stop signal: the table and reports of what had finished (the exit
        # status stays the signal's).
        reported.append(cut)
        finish(args, cut, seeds, store)

    try:
        with open_backend(
            args.tier, targets, seeds, jobs=args.jobs, workers=args.numprocesses, tx=args.tx,
            rsyncdirs=args.rsyncdir, options=tier_options(args),
        ) as backend:  # fmt: skip
            result = run_session(
                targets, seeds, backend, artifacts=store, budget_s=args.budget,
                timeout_s=args.timeout,
                progress=lambda i, total, label: show(mode, i, total, label),
                # Only summary.json shows a trace digest: without --report none is made.
                digests=args.report is not None,
                # A case that hangs in this process ends the run: before it goes, the
                # table and the reports of what ran say so (a campaign failure, exit 2).
                on_hang=lambda cut: finish(args, cut, seeds, store),
                on_interrupt=interrupted,
            )  # fmt: skip
            ended.append(result)
    except INTERRUPTS as exc:
        if reported:
            raise
        if ended:  # every case had ended; the tier was closing
            why = f"{interrupted_by(exc)} as the tier closed, after every case had ended"
            stop = CampaignFailure("interrupted", Verdict.ERROR, why)
            with contextlib.suppress(OSError):
                interrupted(replace(ended[0], stopped=[*ended[0].stopped, stop]))
        else:  # stopped before any case could start (a tier opening, its lock)
            Session(targets, seeds, on_interrupt=interrupted).report_interrupt(exc)
        raise
    # Held while the table and reports go out: a stop then lands once they are whole.
    with stop_signals_held():
        return finish(args, result, seeds, store)


def _left_out_line(args: argparse.Namespace, result: CampaignResult) -> str | None:
    """The footer of a run of every row that left the tier's long matrix out: how many
    rows ran, how many more ``--full`` runs (None: nothing was left out)."""
    from kvfault.faults.campaign.select import long_matrix

    if getattr(args, "full", True) or args.regression or args.fault or args.scenario:
        return None
    left = long_matrix(args.tier)
    if not left:
        return None
    return (
        f"default set: {len(result.targets)} rows; --full also runs the {len(left)} rows "
        f"of the long matrix (kvfault list --tier {args.tier} says which)"
    )


def finish(
    args: argparse.Namespace, result: CampaignResult, seeds: list[int], store: CampaignArtifacts
) -> int:
    """Print the table, write the reports, and return the exit status: all from
    ``result``'s one verdict."""
    from kvfault.faults.report.table import format_campaign

    print(format_campaign(result, store.kept), flush=True)
    if args.budget is not None:
        print(_budget_line(args, result))
    left_out = _left_out_line(args, result)
    if left_out:
        print(left_out, flush=True)
    unwritten: list[str] = []
    if args.report:
        unwritten = write_report(args, result, seeds, store.kept)
        print(f"report: {args.report / 'summary.json'}, {args.report / 'junit.xml'}", flush=True)
    store.tidy()
    if unwritten:  # the verdict stands as printed; a report that lost a file is an error
        more = f" (and {len(unwritten) - 1} more)" if len(unwritten) > 1 else ""
        # Said here, not raised: finish also runs as a stop signal or a hang ends the
        # run, whose own exit status stands.
        return report(KvfaultError(f"--report: {unwritten[0]}{more}"))
    return result.exit_code


def _scaled(targets: list[Target], k: int) -> tuple[list[Target], str | None]:
    """``--scale K`` applied where it means something: a target whose scenario has a
    fixed size runs (and is labelled) at scale 1; when no target's scenario grows, the
    option is refused."""
    from dataclasses import replace

    from kvfault.faults.scenarios import SCENARIOS

    fixed = sorted({t.scenario for t in targets if not SCENARIOS[t.scenario].scales})
    if len(fixed) == len({t.scenario for t in targets}):
        growing = ", ".join(n for n, s in SCENARIOS.items() if s.scales)
        return targets, (
            f"--scale {k} changes nothing here: {', '.join(fixed)} "
            f"{'has' if len(fixed) == 1 else 'have'} a fixed size; these grow: {growing}"
        )
    return [replace(t, scale=1) if t.scenario in fixed else t for t in targets], None


def write_report(
    args: argparse.Namespace, result: CampaignResult, seeds: list[int], kept: dict[str, Path]
) -> list[str]:
    """summary.json and junit.xml (``kvfault.faults.report.summary``), a timeline per failing case;
    returns the timelines that could not be written, each as "PATH: why" (the reports
    say ``"timeline": null`` for them). Without matplotlib there are no timelines, and
    one note says so.

    The summary's own ``ok`` is per case; ``meta.campaign`` carries the campaign's
    verdict, which judges a regression by its target (caught on some seed)."""
    from kvfault.faults.campaign.artifacts import hashseed
    from kvfault.faults.campaign.session import seeds_ran
    from kvfault.faults.report.summary import write_reports

    report: Path = args.report
    report.mkdir(parents=True, exist_ok=True)
    timelines, unwritten = _write_timelines(result, report / "timelines")
    campaign = result.as_json()
    for t in campaign["targets"]:
        del t["cases"]  # they are the summary's cases
    ran = seeds_ran(result)
    meta: dict[str, Any] = {
        "argv": ["kvfault", *sys.argv[1:]],
        "seeds": seeds,
        "seeds_ran": len(ran),
        "pythonhashseed": hashseed(),
        "campaign": campaign,
    }
    if getattr(args, "budget", None) is not None:
        meta["budget_seconds"] = args.budget
        meta["seeds"] = ran  # the seeds that fit; --seeds asked for seeds_requested
        meta["seeds_requested"] = len(seeds)
    write_reports(
        result.cases, report, result.wall_seconds, meta, result, artifacts=kept, timelines=timelines
    )
    return unwritten


def _write_timelines(result: CampaignResult, where: Path) -> tuple[dict[str, Path], list[str]]:
    """A timeline in ``where`` per failing case that kept its runs: the ones written, by
    case id, and the ones that could not be ("PATH: why")."""
    from kvfault.faults.repro import draw_timeline

    written: dict[str, Path] = {}
    unwritten: list[str] = []
    drawn = [
        c
        for c in result.cases
        if not c.ok and (c.legacy_result is not None or c.fixed_result is not None)
    ]
    if not drawn:
        return written, unwritten
    made = not where.exists()
    try:
        where.mkdir(exist_ok=True)
    except FileExistsError:  # a file or a dangling link where the directory goes
        return written, [f"{where}: not a directory, so no timeline can go in it"]
    except OSError as exc:
        return written, [f"{where}: cannot make it: {exc.strerror or exc}"]
    for c in drawn:
        path = where / (c.case.id.replace(":", "-").replace("@", "-") + ".svg")
        try:
            if draw_timeline(c, path):
                written[c.case.id] = path
        except ImportError as exc:  # an optional extra: no pictures, the rest stands
            print(f"kvfault: note: no timelines: {exc}", file=sys.stderr, flush=True)
            if made and not written:  # no empty timelines/ beside the reports
                with contextlib.suppress(OSError):
                    where.rmdir()
            break
        except OSError as exc:
            at = exc.filename or path
            unwritten.append(f"{at}: cannot write timeline: {exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 - a picture never turns a verdict into a crash
            unwritten.append(f"{path}: no timeline: {type(exc).__name__}: {exc}")
    return written, unwritten


def _budget_line(args: argparse.Namespace, result: CampaignResult) -> str:
    """The footer of a budgeted run: how many of the seeds asked for fitted."""
    from kvfault.faults.campaign.session import seeds_ran
    from kvfault.faults.report.table import seed_span

    ran = seeds_ran(result)
    return f"budget {args.budget:g}s: {len(ran)} of {args.seeds} seeds ran ({seed_span(ran)})"
