"""kvfault: fault-injection tests for KV-cache offload in LLM inference engines.

The command line. Commands: ``run`` (the campaign), ``list``, ``repro NAME``, ``replay ARTIFACT``,
``sweep`` (PYTHONHASHSEED) and ``prove`` (two-head proof in any git repository).

Exit codes: 0 everything holds; 1 a property failed, a regression went uncaught or is
still failing, or a fault was not exercised; 2 bad arguments, an error, or nothing
reproduced. Bad arguments give one clear line on stderr and no traceback.

Importing this module imports nothing of the stack: each command imports what it
runs, so ``kvfault list`` and a sweep's child stay cheap (no torch, zmq or faker).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from faults.argtypes import (
    MAX_SCALE,
    MAX_SEED,
    MAX_SEED_COUNT,
    duration,
    names,
    scale,
    seed,
    seed_count,
    timeout_seconds,
)

if TYPE_CHECKING:
    from faults.campaign import CampaignResult, Case, CaseOutcome, Target

# Seeds per target in a plain `kvfault run`: the whole default campaign aims at 10 s on
# 2 cores; it takes about 7.5 CPU seconds, spread over the cores (-j; docs/scale.md,
# benchmarks/bench_scale.py and bench_campaign.py).
DEFAULT_SEEDS = 2
DEFAULT_CASE_TIMEOUT_S = 600.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2, no usage dump
        print(f"kvfault: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse takes `--budget -5s` for two options ("expected one argument") but
        # `--budget=-5s` for a value: give every value that starts like a negative
        # number to its option, so the option's own type says what is wrong with it.
        words = list(sys.argv[1:] if args is None else args)
        takes_one = {s for a in self._actions if a.nargs is None for s in a.option_strings}
        out: list[str] = []
        i = 0
        while i < len(words):
            w = words[i]
            if w == "--":
                out += words[i:]
                break
            if w in takes_one and i + 1 < len(words) and re.match(r"-[\d.]", words[i + 1]):
                out.append(f"{w}={words[i + 1]}")
                i += 2
                continue
            out.append(w)
            i += 1
        return super().parse_known_args(out, namespace)


def _bad(message: str) -> int:
    print(f"kvfault: error: {message}", file=sys.stderr)
    return 2


def _workers(text: str) -> str:
    from faults.fanout import workers_arg  # stdlib only: cheap

    try:
        return workers_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _jobs(text: str) -> int | str:
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(
        f"wants a number of processes (1: this one alone) or 'auto', got {text!r}"
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvfault")
    except PackageNotFoundError:
        return "(not installed)"


class _Version(argparse.Action):
    """``--version``: looks the version up only when asked (importlib.metadata costs
    every other command tens of milliseconds)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", argparse.SUPPRESS)
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"kvfault {_version()}")
        parser.exit()


def _gateway(text: str) -> str:
    from faults.fanout import tx_arg

    try:
        return tx_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_hosts(parser: argparse.ArgumentParser, what: str) -> None:
    # pytest-xdist's own options, handed to it as they are.
    parser.add_argument("--tx", type=_gateway, action="append", default=[], metavar="SPEC",
                        help=f"spread the {what} over this execnet gateway (pytest-xdist's "
                             "--tx: popen, 4*popen, ssh=HOST//python=python3); repeatable")  # fmt: skip
    parser.add_argument("--rsyncdir", action="append", default=[], metavar="DIR",
                        help="with --tx: send DIR to the remote gateways first (pytest-xdist's "
                             "--rsyncdir); repeatable")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kvfault",
        description="Fault-injection tests for KV-cache offload in LLM inference engines: "
        "a campaign of seeded faults and planted regressions against a reference offload "
        "stack, one-command reproductions for reviewers, and two-head proofs for any repo.",
        epilog="Exit codes: 0 everything holds; 1 a property failed, a regression is still "
        "failing or a fault never fired; 2 bad input, an error or a timeout; 130, 143, 129 SIGINT, SIGTERM, SIGHUP.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="the campaign: every regression A/B, the fixed stack under every fault, every scenario",
    )
    run.add_argument("--seed-count", "--seeds", dest="seeds", type=seed_count,
                     default=None, metavar="N",
                     help=f"how many seeds per target, a count (default {DEFAULT_SEEDS}; "
                          "1 with --tier atom, whose runs take seconds each); "
                          "--seeds is the old name")  # fmt: skip
    run.add_argument("--first-seed", type=seed, default=0, help="first seed (default 0)")
    run.add_argument("--regression", action="append", default=None, metavar="NAME",
                     help="run this planted regression (repeatable)")  # fmt: skip
    run.add_argument("--fault", action="append", default=None, metavar="NAME",
                     help="run the fixed stack under this injector (repeatable)")  # fmt: skip
    run.add_argument("--scenario", action="append", default=None, metavar="NAME",
                     help="run this scenario plain (with --swarm: swarm on it) (repeatable)")  # fmt: skip
    run.add_argument("--legacy", default=None, metavar="NAME",
                     help="run the fault, scenario and swarm rows against planted regression "
                          "NAME's legacy rules instead of the fixed stack: what the campaign "
                          "says about a stack with a known bug")  # fmt: skip
    run.add_argument("--swarm", action="store_true",
                     help="instead of one run per fault, each run enables a random subset of "
                          "injectors drawn from its seed")  # fmt: skip
    run.add_argument("--scale", type=scale, default=1, metavar="K",
                     help="multiply each scenario's size by K (burst loads, cold prompts, "
                          f"traffic length; 1 to {MAX_SCALE}; default 1)")  # fmt: skip
    run.add_argument("--pin", type=names, default=[], metavar="A,B",
                     help="with --swarm: enable exactly these injectors in every run")  # fmt: skip
    run.add_argument("--report", type=Path, default=None, metavar="DIR",
                     help="write summary.json, failing cases' artifacts and timelines into DIR")  # fmt: skip
    run.add_argument("--artifacts", type=Path, default=None, metavar="DIR",
                     help="replay artifacts of failing cases (default: DIR/artifacts with "
                          "--report, else .kvfault/artifacts)")  # fmt: skip
    run.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_CASE_TIMEOUT_S, metavar="S",
                     help="a case running longer dumps all stacks and exits (0: never)")  # fmt: skip
    run.add_argument("-j", "--jobs", type=_jobs, default=None, metavar="N",
                     help="run the cases in N processes on this machine (default 'auto': one "
                          "per usable CPU; 1: this process alone)")  # fmt: skip
    run.add_argument("-n", "--numprocesses", type=_workers, default=None, metavar="N",
                     help="spread the cases over N pytest-xdist workers (or 'auto'; 0: none)")  # fmt: skip
    _add_hosts(run, "cases")
    run.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                     help="run as many of the --seeds as fit in DURATION (30s, 5m, 2h): no seed "
                          "starts after it; the report says how many ran")  # fmt: skip
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument("--tier", choices=("memory", "lmcache", "atom"), default="memory",
                     help="memory: the embedded in-process tier in virtual time (default); "
                          "lmcache: a real lmcache server on 127.0.0.1, in real time, with "
                          "wire faults (needs the lmcache extra: pip install -c "
                          "constraints/ci.txt '.[lmcache]'); atom: ATOM's real scheduler and "
                          "offload connector from --atom-src, with a real lmcache engine "
                          "(needs the lmcache and atom extras)")  # fmt: skip
    run.add_argument("--atom-src", default=None, metavar="PATH",
                     help="with --tier atom: the ATOM checkout under test (default: "
                          "$KVFAULT_ATOM_SRC)")  # fmt: skip

    lst = sub.add_parser("list", help="list scenarios, properties, faults and regressions")
    lst.add_argument("--scenarios", action="store_true", help="only scenarios")
    lst.add_argument("--properties", action="store_true", help="only properties")
    lst.add_argument("--faults", action="store_true", help="only fault injectors")
    lst.add_argument("--regressions", action="store_true", help="only planted regressions")
    lst.add_argument("--tier", choices=("memory", "lmcache", "atom"), default=None,
                     help="atom: what runs on the ATOM tier and why the rest does not")  # fmt: skip

    repro = sub.add_parser(
        "repro", help="run a planted regression legacy vs fixed and give the verdict"
    )
    repro.add_argument(
        "name", metavar="NAME", help="a planted regression (kvfault list --regressions)"
    )
    repro.add_argument("--seed", type=seed, default=0, help="the run's seed (default 0)")
    repro.add_argument("--timeline", type=Path, default=None, metavar="PATH",
                       help="draw the legacy and fixed timelines (.png, .svg, .pdf or .jpg)")  # fmt: skip
    repro.add_argument("--artifacts", type=Path, default=None, metavar="DIR",
                       help="where the replay artifact goes (default .kvfault/artifacts)")  # fmt: skip
    repro.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_CASE_TIMEOUT_S, metavar="S",
                       help="a hang dumps all stacks and exits after S seconds (0: never)")  # fmt: skip

    replay = sub.add_parser("replay", help="rerun the case a replay artifact names")
    replay.add_argument("artifact", type=Path, metavar="ARTIFACT", help="a JSON replay artifact")
    replay.add_argument("--timeline", type=Path, default=None, metavar="PATH",
                        help="draw the case's timeline (.png, .svg, .pdf or .jpg)")  # fmt: skip
    replay.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_CASE_TIMEOUT_S, metavar="S",
                        help="a hang dumps all stacks and exits after S seconds (0: never)")  # fmt: skip

    sweep = sub.add_parser("sweep", help="run pytest once per PYTHONHASHSEED")
    sweep.add_argument("--hashseeds", default="0-15", metavar="RANGE",
                       help="hash seeds, e.g. 0-15 or 0-3,8 (default 0-15)")  # fmt: skip
    sweep.add_argument("-j", "--jobs", type=_workers, default=None, metavar="N",
                       help="spread the seeds over N pytest-xdist workers (or 'auto'; 0: none); "
                            "-n after -- spreads each seed's tests instead")  # fmt: skip
    _add_hosts(sweep, "seeds")
    sweep.add_argument("--timeout", type=timeout_seconds, default=0, metavar="S",
                       help="seconds per seed before its pytest is killed (0: none)")  # fmt: skip
    sweep.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                       help="what each seed's `python -m pytest` gets")  # fmt: skip

    prove = sub.add_parser("prove", help="prove that NEW fixes what fails at OLD (any git repo)")
    from faults.prove import add_arguments  # stdlib only: cheap

    add_arguments(prove)
    return parser


# -- list -------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    if args.tier == "atom":
        from faults.atom.command import list_command

        return list_command(args)
    from faults.catalog import entries
    from faults.properties.checks import PROPERTIES

    def first_line(text: str | None) -> str:
        # A docstring's first sentence, on one line.
        flat = " ".join((text or "").split())
        return flat.split(". ")[0].rstrip(".")

    def where(e) -> str:  # type: ignore[no-untyped-def]
        # Which tiers a name runs on (memory, the default, needs no flag), and where.
        parts = []
        for tier, scenario in e.scenarios.items():
            on = "" if e.kind == "scenario" else f" {scenario}"
            parts.append(f"on{on}" if tier == "memory" else f"--tier lmcache{on and ':'}{on}")
        if e.kind == "scenario" and len(parts) == 1 and e.tiers == ("lmcache",):
            parts = ["--tier lmcache only"]
        elif e.kind == "scenario":
            parts = ["also --tier lmcache"] if "lmcache" in e.tiers else []
        return f" [{'; '.join(parts)}]" if parts else ""

    from faults.regressions.legacy import REGRESSIONS
    from faults.scenarios import SCENARIOS

    def grows(e) -> str:  # type: ignore[no-untyped-def]
        # What --scale K multiplies, for a scenario that has a size.
        scenario = SCENARIOS.get(e.name)
        return f" [--scale K: {scenario.scales}]" if scenario and scenario.scales else ""

    def regression_line(e) -> str:  # type: ignore[no-untyped-def]
        return f"{e.description}{where(e)[:-1]}; caught by {REGRESSIONS[e.name].signature}]"

    sections = {
        "scenarios": [
            (e.name, f"{e.description}{where(e)}{grows(e)}") for e in entries("scenario").values()
        ],
        "properties": [(n, first_line(fn.__doc__)) for n, fn in PROPERTIES.items()]
        + [("determinism", "the same seed gives the same trace digest")],
        "faults": [(e.name, f"{e.description}{where(e)}") for e in entries("fault").values()],
        "regressions": [(e.name, regression_line(e)) for e in entries("regression").values()],
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


# -- run --------------------------------------------------------------------------------


class _Lines:
    """Progress as lines (stderr is not a terminal): the first, one each tenth of the
    cases or each ``every_s`` seconds, whichever comes first, and the last; about a
    dozen lines a run, not one per case."""

    def __init__(self, every_s: float = 30.0) -> None:
        import time

        self.clock = time.monotonic
        self.every_s = every_s
        self.last_i: int | None = None
        self.last_t = 0.0

    def due(self, i: int, total: int) -> bool:
        now = self.clock()
        step = max(1, total // 10)
        if (
            self.last_i is None
            or i == total
            or i - self.last_i >= step
            or now - self.last_t >= self.every_s
        ):
            self.last_i, self.last_t = i, now
            return True
        return False


def _progress_mode(args: argparse.Namespace) -> str | _Lines | None:
    """``bar`` on a terminal, ``_Lines`` when stderr is not one (CI, a pipe: a run is
    not silent for minutes, nor one line per case), None with ``--no-progress``."""
    if args.no_progress:
        return None
    return "bar" if sys.stderr.isatty() else _Lines()


def _progress(enabled: str | _Lines | bool | None, i: int, total: int, label: str) -> None:
    if not enabled or total == 0:
        return
    if isinstance(enabled, _Lines) or enabled == "lines":
        if isinstance(enabled, _Lines) and not enabled.due(i, total):
            return
        what = "done" if i == total else f"running {label}"
        print(f"kvfault: {i}/{total} cases done; {what}", file=sys.stderr, flush=True)
        return
    width = 24
    done = int(width * i / total)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{total} {label[:48]:48s}")
    if i == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _campaign_exit(result: CampaignResult) -> int:
    """The campaign's own exit status (``CampaignResult.exit_code``), the one its
    footer, summary.json and junit.xml report."""
    return result.exit_code


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """A campaign allocates millions of small objects that hold no cycles (trace
    events, requests): look for cycles every 50,000 allocations, not every 700, and
    never in what was loaded before it started."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _cmd_run(args: argparse.Namespace) -> int:
    from faults.campaign import CampaignError, run_campaign, select_targets
    from faults.campaign.hang_guard import arm_hang_guard, disarm_hang_guard
    from faults.report.artifacts import CampaignArtifacts, artifact_dir

    if args.seeds is None:
        args.seeds = 1 if args.tier == "atom" else DEFAULT_SEEDS
    if args.seeds > MAX_SEED_COUNT and args.budget is None:
        return _bad(
            f"--seed-count {args.seeds} is more than {MAX_SEED_COUNT} seeds per target "
            "(each runs every target once: that would take days); give --budget to run as "
            "many as fit in a time"
        )
    last = args.first_seed + args.seeds - 1
    if last > MAX_SEED:
        return _bad(
            f"--first-seed {args.first_seed} --seeds {args.seeds} reaches seed {last}; "
            f"seeds go up to {MAX_SEED}"
        )
    bad = _hosts_refused(args)  # on every tier
    if bad:
        return _bad(bad)
    if args.tier == "atom":
        from faults.atom.command import run_command

        return run_command(args)
    tier = "memory" if args.tier == "memory" else "lmcache"
    explicit_jobs = args.jobs not in (None, "auto", 1)
    if tier == "lmcache" and (args.numprocesses not in (None, "0") or args.tx or explicit_jobs):
        return _bad("--tier lmcache runs in one process (one real server): drop -n/--tx/-j")
    if tier == "lmcache" and args.scale != 1:
        return _bad("--scale is for the simulated tier; --tier lmcache runs at scale 1")
    try:
        targets = select_targets(
            args.regression, args.fault, args.scenario, args.swarm, args.pin, args.scale,
            tier=tier, stack=args.legacy,
        )  # fmt: skip
    except CampaignError as exc:
        return _bad(f"{exc}; see `kvfault list`")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if args.artifacts is None and args.report is not None:
        args.artifacts = args.report / "artifacts"
    if args.tx and args.numprocesses is not None:
        return _bad("give -n or --tx, not both")
    if args.scale != 1:
        targets, bad = _scaled(targets, args.scale)
        if bad:
            return _bad(bad)
    if args.jobs is not None and (args.tx or args.numprocesses is not None):
        return _bad("give -j (processes here) or -n/--tx (pytest-xdist workers), not both")
    for path, flag in ((args.report, "--report"), (artifact_dir(args.artifacts), "--artifacts")):
        bad = _dir_refused(path, flag) if path is not None else None
        if bad:
            return _bad(bad)
    store = CampaignArtifacts(artifact_dir(args.artifacts))
    mode = _progress_mode(args)
    # Only summary.json shows a trace digest: without --report no judged run is digested.
    digests = args.report is not None
    if args.tx or args.numprocesses not in (None, "0"):
        from faults.spread import keep_artifacts, run_spread

        result = run_spread(
            targets,
            seeds,
            workers=args.numprocesses,
            tx=args.tx,
            rsyncdirs=args.rsyncdir,
            budget_s=args.budget,
            artifacts=store.directory,
            timeout_s=args.timeout,
            progress=lambda i, total, label: _progress(mode, i, total, label),
        )
        store.kept.update(keep_artifacts(result, store.directory))
    elif tier == "memory" and _jobs_here(args.jobs, targets, seeds) > 1:
        from faults.campaign.pool import run_pooled

        def started(i: int, total: int, case: Case) -> None:
            _progress(mode, i, total, "done" if i == total else case.id)

        with _few_collections():
            result = run_pooled(
                targets, seeds, _jobs_here(args.jobs, targets, seeds), before=store.before,
                after=store.after,
                progress=started, timeout_s=args.timeout, budget_s=args.budget,
                digests=digests,
            )  # fmt: skip
    else:

        def progress(i: int, total: int, case: Case) -> None:
            _progress(mode, i, total, "done" if i == total else case.id)

        done: dict[tuple[str, int], CaseOutcome] = {}
        t0 = time.perf_counter()

        def timed_out(case: Case, staged: tuple[Path, bytes | None]) -> None:
            wall = time.perf_counter() - t0
            result = _cut_short(targets, seeds, done, case, args.timeout, wall)
            store.after(case, next(c for c in result.cases if c.case.id == case.id), staged)
            _finish(args, result, seeds, store)

        def before(case: Case) -> tuple[Path, bytes | None]:
            staged = store.before(case)
            # A case that hangs dumps every stack and ends the run instead of blocking
            # CI; its artifact is on disk already. Before the process ends, the table
            # and the reports of what ran say so (a campaign failure, exit 2).
            arm_hang_guard(args.timeout, lambda: timed_out(case, staged))
            return staged

        def after(case: Case, outcome: CaseOutcome, staged: tuple[Path, bytes | None]) -> None:
            disarm_hang_guard()
            done[(case.target.id, case.seed)] = outcome
            store.after(case, outcome, staged)

        from faults.campaign.tiers import open_executor

        with open_executor(tier) as executor, _few_collections():
            if args.budget is None:
                result = run_campaign(
                    targets, seeds, before=before, after=after, progress=progress,
                    executor=executor, digests=digests,
                )  # fmt: skip
            else:
                from faults.spread import run_within_budget

                result = run_within_budget(
                    targets, seeds, args.budget, before, after, progress,
                    executor=executor, digests=digests,
                )  # fmt: skip
    return _finish(args, result, seeds, store)


def _finish(args: argparse.Namespace, result: CampaignResult, seeds: list[int], store: Any) -> int:
    """Print the table, write the reports, and return the exit status: all from
    ``result``'s one verdict."""
    from faults.report.table import format_campaign

    print(format_campaign(result, store.kept), flush=True)
    if args.budget is not None:
        print(_budget_line(args, result))
    if args.report:
        _write_report(args, result, seeds, store.kept)
        print(f"report: {args.report / 'summary.json'}, {args.report / 'junit.xml'}", flush=True)
    store.tidy()
    return _campaign_exit(result)


def _cut_short(
    targets: Sequence[Target],
    seeds: Sequence[int],
    done: dict[tuple[str, int], CaseOutcome],
    case: Case,
    timeout_s: float,
    wall_s: float,
) -> CampaignResult:
    """A run in this process that ``case`` ended by running past ``--timeout``: what
    ran, that case as an ERROR, and a ``timeout`` campaign failure naming what never ran."""
    from faults.campaign import CampaignResult
    from faults.campaign.outcomes import CampaignFailure, CaseOutcome, in_campaign_order
    from faults.verdicts import Verdict

    hung = CaseOutcome(
        case, Verdict.ERROR, signature=f"ran past --timeout {timeout_s:g}s (stacks on stderr)"
    )
    ran = {**done, (case.target.id, case.seed): hung}
    total = len(targets) * len(seeds)
    failure = CampaignFailure(
        "timeout",
        Verdict.ERROR,
        f"{case.id} ran past --timeout {timeout_s:g}s and ended the run: "
        f"{total - len(ran)} of {total} cases never ran",
    )
    rows = [t for t in in_campaign_order(targets, seeds, ran) if t.cases]
    return CampaignResult(rows, wall_s, stopped=[failure])


def _hosts_refused(args: argparse.Namespace) -> str | None:
    """Why ``--rsyncdir``/``--tx`` cannot run as given: rsync with no gateway to send
    to, or more gateways in all than one command may start."""
    from faults.fanout import MAX_WORKERS, gateway_count

    if args.rsyncdir and not args.tx:
        return "--rsyncdir sends a directory to --tx gateways; give --tx too (or drop it)"
    total = sum(gateway_count(t) for t in args.tx)
    if total > MAX_WORKERS:
        return f"--tx starts {total} gateways in all; at most {MAX_WORKERS}"
    return None


def _scaled(targets: list[Target], k: int) -> tuple[list[Target], str | None]:
    """``--scale K`` applied where it means something: a target whose scenario has a
    fixed size runs (and is labelled) at scale 1; when no target's scenario grows, the
    option is refused."""
    from dataclasses import replace

    from faults.scenarios import SCENARIOS

    fixed = sorted({t.scenario for t in targets if not SCENARIOS[t.scenario].scales})
    if len(fixed) == len({t.scenario for t in targets}):
        growing = ", ".join(n for n, s in SCENARIOS.items() if s.scales)
        return targets, (
            f"--scale {k} changes nothing here: {', '.join(fixed)} "
            f"{'has' if len(fixed) == 1 else 'have'} a fixed size; these grow: {growing}"
        )
    return [replace(t, scale=1) if t.scenario in fixed else t for t in targets], None


def _jobs_here(jobs: int | str | None, targets: Sequence[Target], seeds: Sequence[int]) -> int:
    """``-j``: processes for the in-process tier; ``auto`` (the default) is one per
    usable CPU; never more than the campaign's units of work (one unit: this process
    alone), and 1 where workers cannot be forked."""
    from faults.campaign.pool import can_fork, units, usable_cpus

    if not can_fork():
        return 1
    wanted = usable_cpus() if jobs in (None, "auto") else int(jobs)
    return min(wanted, len(units(targets, seeds)))


def _write_report(
    args: argparse.Namespace, result: CampaignResult, seeds: list[int], kept: dict[str, Path]
) -> None:
    """summary.json and junit.xml (``faults.report.summary``), a timeline per failing case.

    The summary's own ``ok`` is per case; ``meta.campaign`` carries the campaign's
    verdict, which judges a regression by its target (caught on some seed)."""
    from faults.report.artifacts import hashseed, replay_command
    from faults.report.summary import CaseReport, write_reports
    from faults.repro import write_timeline

    report: Path = args.report
    report.mkdir(parents=True, exist_ok=True)
    cases = []
    for c in result.cases:
        timeline = None
        if not c.ok and (c.legacy_result is not None or c.fixed_result is not None):
            path = report / "timelines" / (c.case.id.replace(":", "-").replace("@", "-") + ".svg")
            path.parent.mkdir(exist_ok=True)
            why = write_timeline(c, path)
            timeline = str(path) if why is None else None
        artifact = kept.get(c.case.id)
        cases.append(
            CaseReport.of(
                c,
                command=replay_command(c.case),
                artifact=str(artifact) if artifact else None,
                timeline=timeline,
                tolerated=result.tolerated(c),
            )
        )
    campaign = result.as_json()
    for t in campaign["targets"]:
        del t["cases"]  # they are the summary's cases
    from faults.spread import seeds_ran

    ran = seeds_ran(result)
    meta = {
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
    write_reports(cases, report, result.wall_seconds, meta, campaign=result)


def _budget_line(args: argparse.Namespace, result: CampaignResult) -> str:
    """The footer of a budgeted run: how many of the seeds asked for fitted."""
    from faults.report.table import seed_span
    from faults.spread import seeds_ran

    ran = seeds_ran(result)
    return f"budget {args.budget:g}s: {len(ran)} of {args.seeds} seeds ran ({seed_span(ran)})"


# -- repro and replay -------------------------------------------------------------------


def _cmd_repro(args: argparse.Namespace) -> int:
    from faults.campaign import CampaignError, Case, regression_target
    from faults.report.artifacts import artifact_dir
    from faults.repro import format_reproduction, reproduce

    try:
        target = regression_target(args.name)
    except CampaignError as exc:
        return _bad(f"{exc}; see `kvfault list --regressions`")
    bad = _timeline_refused(args.timeline) or _dir_refused(
        artifact_dir(args.artifacts), "--artifacts" if args.artifacts else "the artifact directory"
    )
    if bad:
        return _bad(bad)
    rep = reproduce(Case(target, args.seed), artifact_dir(args.artifacts), args.timeout)
    print(format_reproduction(rep))
    return _timeline(args.timeline, rep.outcome, rep.exit_code)


def _cmd_replay(args: argparse.Namespace) -> int:
    from faults.report.artifacts import hashseed, read_artifact
    from faults.repro import format_reproduction, reproduce

    case, obj = read_artifact(args.artifact)
    bad = _timeline_refused(args.timeline)
    if bad:
        return _bad(bad)
    recorded = obj.get("pythonhashseed")
    if recorded is not None and str(recorded) != str(hashseed()):
        print(
            f"kvfault: note: recorded under PYTHONHASHSEED={recorded}, running under "
            f"{hashseed() or 'a random one'}; for the same hash order run "
            f"PYTHONHASHSEED={recorded} kvfault replay {args.artifact}",
            file=sys.stderr,
        )
    # The artifact exists already: replay must not rewrite it.
    rep = reproduce(case, None, args.timeout)
    rep.artifact = args.artifact
    print(format_reproduction(rep))
    return _timeline(args.timeline, rep.outcome, rep.exit_code)


def _dir_refused(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot be (made into) a directory we write files in, or None."""
    if path.exists() and not path.is_dir():
        return f"{flag} {path} is a file, not a directory"
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{flag} {path}: {existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{flag} {path}: {existing} is not writable"
    return None


def _timeline_refused(path: Path | None) -> str | None:
    """Why ``--timeline PATH`` cannot be written, checked before the case runs: an
    extension that names no picture format, no matplotlib, or a place that cannot
    hold the file."""
    if path is None:
        return None
    import importlib.util

    from faults.report.timeline import PLOT_HINT, picture_format

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
    from faults.repro import write_timeline

    why = write_timeline(outcome, path)
    if why is not None:
        print(f"kvfault: error: --timeline {path}: {why}", file=sys.stderr)
        return 2
    print(f"timeline: {path}")
    return code


# -- sweep ------------------------------------------------------------------------------


def _cmd_sweep(args: argparse.Namespace) -> int:
    from faults.sweep import SweepError, format_result, format_seed, parse_seeds, sweep

    raw = list(args.pytest_args)
    if raw and raw[0] == "--":
        raw = raw[1:]
    elif raw:
        return _bad(f"put pytest's arguments after '--' (got {shlex.join(raw)!r})")
    try:
        seeds = parse_seeds(args.hashseeds)
    except SweepError as exc:
        return _bad(f"--hashseeds: {exc}")
    shown = shlex.join(["python", "-m", "pytest", *raw])
    print(
        f"kvfault sweep: PYTHONHASHSEED in {args.hashseeds} ({len(seeds)} seeds): {shown}",
        flush=True,
    )
    if args.tx and args.jobs is not None:
        return _bad("give -j or --tx, not both")
    bad = _hosts_refused(args)
    if bad:
        return _bad(bad)
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


def _cmd_prove(args: argparse.Namespace) -> int:
    from faults.prove import run

    return run(args)


COMMANDS = {
    "run": _cmd_run,
    "list": _cmd_list,
    "repro": _cmd_repro,
    "replay": _cmd_replay,
    "sweep": _cmd_sweep,
    "prove": _cmd_prove,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Bad input, an unwritable place, a full disk or an error: one line
    on stderr naming the path, exit 2. SIGINT, SIGTERM or SIGHUP: one line naming it,
    exit 130, 143 or 129, after every process the command started is stopped (as
    ``kvfault prove`` does). A reader that went away (``kvfault list | head -1``): no
    traceback, exit 141, what a shell reports for SIGPIPE. A closed or full stdout: one
    line, exit 2; a closed or full stderr: the exit code stands
    (``faults.streams``)."""
    import signal
    import tempfile

    from faults.errors import KvfaultError
    from faults.processes import Interrupted, Signals, stop_descendants  # stdlib only: cheap
    from faults.streams import guard_streams

    # tempfile finds its directory by creating and removing a probe file there; do it
    # now, before a signal can land between the two and leave the probe behind.
    tempfile.gettempdir()
    signals = Signals()
    signals.install()
    try:
        with guard_streams():  # argparse's own error line too
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return 2
            if argv is None:  # the command itself, not a caller in Python: its process is ours
                _run_under_known_hash_seed(args)
            return COMMANDS[args.command](args)
    except KeyboardInterrupt as exc:
        _disarm_guards()
        stop_descendants()
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        _say(f"kvfault: interrupted by {signal.Signals(signum).name}")
        return 128 + signum
    except BrokenPipeError:
        # Whoever read our output has gone; say nothing more to it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KvfaultError as exc:  # every error of kvfault's own: one line, its exit code
        _say(f"kvfault: error: {exc.line()}")
        return exc.exit_code
    except OSError as exc:  # a place that cannot be written, a full disk, a full stdout
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _say(f"kvfault: error: {where}{exc.strerror or exc}")
        return 2
    finally:
        signals.restore()


def _run_under_known_hash_seed(args: argparse.Namespace) -> None:
    """``repro``, ``replay`` and ``run`` run under a PYTHONHASHSEED they know, so every
    artifact records the hash order its case ran in and a replay gets it back: replay
    the artifact's; repro the one set, else 0; run the one set, else a fresh random one
    (runs still vary, each one recorded). Where this process's differs, or is random,
    the same command line is executed again in its place under that seed (``exec``:
    same process id, signals and exit status)."""
    from faults.repro import wanted_hash_seed

    wanted = wanted_hash_seed(args.command, getattr(args, "artifact", None))
    if wanted is None or wanted == os.environ.get("PYTHONHASHSEED"):
        return
    env = {**os.environ, "PYTHONHASHSEED": wanted}
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execve(sys.executable, argv, env)
    import subprocess

    raise SystemExit(subprocess.call(argv, env=env))


def _say(line: str) -> None:
    """One line on stderr, if stderr can take it (it may be closed or full)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr, flush=True)


def _disarm_guards() -> None:
    import faulthandler

    faulthandler.cancel_dump_traceback_later()
    if "faults.campaign.hang_guard" in sys.modules:
        sys.modules["faults.campaign.hang_guard"].disarm_hang_guard()


if __name__ == "__main__":
    raise SystemExit(main())
