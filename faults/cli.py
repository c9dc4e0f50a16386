"""kvfault: fault-injection tests for KV-cache offload in LLM inference engines.

The command line. Commands: ``run`` (the campaign), ``list``, ``repro NAME``, ``replay ARTIFACT``,
``sweep`` (PYTHONHASHSEED), ``prove`` (two-head proof in any git repository),
``review`` (a pull request's per-row verdict, ``kvfault.faults.review``: FIXED 0, REGRESSED 1,
COULD NOT JUDGE 2, UNCHANGED 3) and ``gpu-info`` (the GPU restore path ``auto`` takes,
and why).

Exit codes: 0 everything holds; 1 a property failed, a regression went uncaught or is
still failing, or a fault was not exercised; 2 bad arguments, an error, or nothing
reproduced. Bad arguments give one clear line on stderr and no traceback.
Importing this module imports nothing of the stack: each command imports what it
runs, so ``kvfault list`` and a sweep's child stay cheap (no torch, zmq or faker).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from typing import Any, Callable, NoReturn, Sequence

from kvfault.faults.argtypes import (
    DEFAULT_CASE_TIMEOUT_S,
    MAX_SCALE,
    Once,
    duration,
    gateway,
    jobs,
    names,
    path,
    scale,
    seed,
    seed_count,
    timeout_seconds,
    workers,
)
from kvfault.faults.commands.run import DEFAULT_SEEDS, add_tier_options
from kvfault.faults.errors import UsageError


class _Parser(argparse.ArgumentParser):
    # Added when it first parses (run's tier options): only run reads the tier registry.
    late_options: Callable[[argparse.ArgumentParser], None] | None = None

    def error(self, message: str) -> NoReturn:  # one clear line, exit 2, no usage dump
        if re.match(r"ambiguous option: --seed[ =]", message):  # repro's spelling, on run
            message += "; for one seed give --first-seed N --seeds 1"
        raise UsageError(message)  # said by main, as every error of kvfault's own

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse takes `--budget -5s` for two options ("expected one argument") but
        # `--budget=-5s` for a value: give every value that starts like a negative
        # number to its option, so the option's own type says what is wrong with it.
        if self.late_options is not None:
            add, self.late_options = self.late_options, None
            add(self)
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


def _add_hosts(parser: argparse.ArgumentParser, what: str) -> None:
    # pytest-xdist's own options, handed to it as they are.
    parser.add_argument("--tx", type=gateway, action="append", default=[], metavar="SPEC",
                        help=f"spread the {what} over this execnet gateway (pytest-xdist's "
                             "--tx: popen, 4*popen, ssh=HOST//python=python3); repeatable")  # fmt: skip
    parser.add_argument("--rsyncdir", action="append", default=[], metavar="DIR",
                        help="with --tx: send DIR to the remote gateways first (pytest-xdist's "
                             "--rsyncdir); repeatable")  # fmt: skip


def tier_name(text: str) -> str:
    """A ``type=`` for ``--tier``: a registered tier's name (``kvfault.faults.tiers``)."""
    from kvfault.faults.tiers import TierError, Tiers

    try:
        Tiers.installed()[text]
    except TierError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


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
                     help=f"how many seeds per target, a count (default {DEFAULT_SEEDS}, or "
                          "the tier's own: 1 with --tier atom, whose runs take seconds each); "
                          "--seeds is the old name")  # fmt: skip
    run.add_argument("--first-seed", type=seed, default=0, help="first seed (default 0)")
    run.add_argument("--regression", action="append", default=None, metavar="NAME",
                     help="run this planted regression (repeatable)")  # fmt: skip
    run.add_argument("--fault", action="append", default=None, metavar="NAME",
                     help="run the fixed stack under this injector (repeatable)")  # fmt: skip
    run.add_argument("--scenario", action="append", default=None, metavar="NAME",
                     help="run this scenario plain (with --swarm: swarm on it) (repeatable)")  # fmt: skip
    run.add_argument("--full", action="store_true",
                     help="with no rows named: every row, the tier's long matrix too (the "
                          "rows `kvfault list --tier TIER` marks 'full'; a row named always "
                          "runs)")  # fmt: skip
    run.add_argument("--legacy", default=None, metavar="NAME", action=Once,
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
    run.add_argument("--report", type=path, default=None, metavar="DIR",
                     help="write summary.json, junit.xml and the failing cases' artifacts and "
                          "timelines into DIR")  # fmt: skip
    run.add_argument("--artifacts", type=path, default=None, metavar="DIR",
                     help="replay artifacts of failing cases (default: DIR/artifacts with "
                          "--report, else .kvfault/artifacts)")  # fmt: skip
    run.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_CASE_TIMEOUT_S, metavar="S",
                     help="a case still running after S seconds is an ERROR: every stack is "
                          "printed and its process ends (a worker: the run goes on; -j 1: "
                          "the run ends, exit 2); default %(default)g, 0: never")  # fmt: skip
    run.add_argument("-j", "--jobs", type=jobs, default=None, metavar="N",
                     help="run the cases in N processes on this machine (default 'auto': one "
                          "per usable CPU; 1: this process alone)")  # fmt: skip
    run.add_argument("-n", "--numprocesses", type=workers, default=None, metavar="N",
                     help="spread the cases over N pytest-xdist workers (or 'auto'; 0: none)")  # fmt: skip
    _add_hosts(run, "cases")
    run.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                     help="run as many of the --seeds as fit in DURATION (30s, 5m, 2h): no seed "
                          "starts after it; the report says how many ran")  # fmt: skip
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.late_options = add_tier_options  # each registered tier's own options
    run.add_argument("--tier", type=tier_name, default=None, metavar="TIER",
                     help="the tier to run on: a registered tier (default %(default)s); "
                          "`kvfault list --tiers` names each and what it needs")  # fmt: skip

    lst = sub.add_parser("list", help="list scenarios, properties, faults and regressions")
    lst.add_argument("--scenarios", action="store_true", help="only scenarios")
    lst.add_argument("--properties", action="store_true", help="only properties")
    lst.add_argument("--faults", action="store_true", help="only fault injectors")
    lst.add_argument("--regressions", action="store_true", help="only planted regressions")
    lst.add_argument("--tiers", action="store_true", help="only the registered tiers")
    lst.add_argument("--tier", type=tier_name, default=None, metavar="TIER",
                     help="a tier with its own catalog (atom): what runs there and why the "
                          "rest does not")  # fmt: skip

    repro = sub.add_parser(
        "repro", help="run a planted regression legacy vs fixed and give the verdict"
    )
    repro.add_argument(
        "name", metavar="NAME", help="a planted regression (kvfault list --regressions)"
    )
    repro.add_argument("--seed", type=seed, default=0, help="the run's seed (default 0)")
    repro.add_argument("--timeline", type=path, default=None, metavar="PATH",
                       help="draw the legacy and fixed timelines (.png, .svg, .pdf or .jpg)")  # fmt: skip
    repro.add_argument("--artifacts", type=path, default=None, metavar="DIR",
                       help="where the replay artifact goes (default .kvfault/artifacts)")  # fmt: skip
    repro.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_CASE_TIMEOUT_S, metavar="S",
                       help="a hang dumps all stacks and exits after S seconds (0: never)")  # fmt: skip

    replay = sub.add_parser("replay", help="rerun the case a replay artifact names")
    replay.add_argument("artifact", type=path, metavar="ARTIFACT", help="a JSON replay artifact")
    replay.add_argument("--timeline", type=path, default=None, metavar="PATH",
                        help="draw the case's timeline (.png, .svg, .pdf or .jpg)")  # fmt: skip
    replay.add_argument("--timeout", type=timeout_seconds, default=None, metavar="S",
                        help="a hang dumps all stacks and exits after S seconds (0: never; "
                             "default: the --timeout the case ran past, else 600)")  # fmt: skip

    sweep = sub.add_parser("sweep", help="run pytest once per PYTHONHASHSEED")
    sweep.add_argument("--hashseeds", default="0-15", metavar="RANGE",
                       help="hash seeds, e.g. 0-15 or 0-3,8 (default 0-15)")  # fmt: skip
    sweep.add_argument("-j", "--jobs", type=workers, default=None, metavar="N",
                       help="spread the seeds over N pytest-xdist workers (or 'auto'; 0: none); "
                            "-n after -- spreads each seed's tests instead")  # fmt: skip
    _add_hosts(sweep, "seeds")
    sweep.add_argument("--timeout", type=timeout_seconds, default=0, metavar="S",
                       help="seconds per seed before its pytest is killed (0: none)")  # fmt: skip
    sweep.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                       help="what each seed's `python -m pytest` gets")  # fmt: skip

    prove = sub.add_parser("prove", help="prove that NEW fixes what fails at OLD (any git repo)")
    from kvfault.faults.prove import add_arguments  # stdlib only: cheap

    add_arguments(prove)

    review = sub.add_parser(
        "review",
        help="a pull request's per-row verdict: the tier's campaign at BASE and HEAD, "
        "compared row by row (run inside the checkout under test)",
    )
    from kvfault.faults.review import add_arguments as add_review_arguments

    add_review_arguments(review)
    review.late_options = add_tier_options  # --property, ...: passed on to both sides

    gpu = sub.add_parser("gpu-info", help="the GPU, its host pool's placement, and the restore path 'auto' takes per page size, with why")  # fmt: skip
    from kvfault.faults.commands.gpu_info import (
        add_arguments as gpu_arguments,  # stdlib only: cheap
    )

    gpu_arguments(gpu)
    return parser


# Each command's module and function, imported when it runs (``faults.commands``).
COMMANDS = {
    "run": "kvfault.faults.commands.run:command",
    "list": "kvfault.faults.commands.listing:command",
    "repro": "kvfault.faults.commands.repro:repro_command",
    "replay": "kvfault.faults.commands.repro:replay_command",
    "sweep": "kvfault.faults.commands.sweep:command",
    "prove": "kvfault.faults.prove:run",
    "review": "kvfault.faults.review:run",
    "gpu-info": "kvfault.faults.commands.gpu_info:command",
}


def _command(name: str) -> Any:
    module, _, fn = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), fn)


def main(argv: Sequence[str] | None = None, *, program: bool = False) -> int:
    """Run one command. Bad input, an unwritable place, a full disk or an error: one line
    on stderr naming the path, exit 2. SIGINT, SIGTERM or SIGHUP: one line naming it,
    exit 130, 143 or 129, after every process the command started is stopped (as
    ``kvfault prove`` does). A reader that went away (``kvfault list | head -1``): no
    traceback, exit 141, what a shell reports for SIGPIPE. A closed or full stdout: one
    line, exit 2; a closed or full stderr: the exit code stands
    (``kvfault.faults.streams``). ``program``: this is the process's own command (the console
    script, ``python -m kvfault.faults.cli``), which exits next: a stop signal that comes once
    the command has ended is ignored rather than the handlers put back."""

    from kvfault.faults.processes import Signals  # stdlib only: cheap
    from kvfault.reference.signals import unblock_stop_signals

    # The handlers go in first: a signal that lands during the imports below also ends
    # the command with its one line.
    signals = Signals()
    signals.install()
    code, stopped, late = 2, False, None
    try:
        unblock_stop_signals()  # blocked by kvfault's entry or a re-exec
        code = _command_line(argv, signals)
    except KeyboardInterrupt as exc:
        code, stopped = _stopped(exc), True
    finally:
        try:
            # What a worker stopped mid-case left of its ipc directory goes, however we
            # ended.
            from kvfault.reference.stack.lookup_channel import remove_orphan_rpc_dirs

            remove_orphan_rpc_dirs(empty_unowned=stopped)
        except KeyboardInterrupt as exc:  # the first stop came during this cleanup
            late = exc
        if program:
            signals.ignore_from_now()
        else:
            signals.restore()
    return _stopped(late) if late is not None else code


def _command_line(argv: Sequence[str] | None, signals: Any) -> int:
    """Parse and run one command; its errors as one line each and their exit code."""
    try:
        import tempfile

        from kvfault.faults.streams import guard_streams

        # tempfile finds its directory by creating and removing a probe file there:
        # held, a signal cannot land between the two and leave the probe behind.
        with signals.deferred():
            tempfile.gettempdir()
        # A path with a byte that is not UTF-8 (``--report $'rep\xff'``) reaches us as a
        # lone surrogate: printed, it is that byte again, never an encoding traceback.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
        with guard_streams():  # argparse's own error line too
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
                commands = ", ".join(sub.choices)
                raise UsageError(f"give a command: {commands} (kvfault --help)")
            if argv is None:  # the command itself, not a caller in Python: its process is ours
                _run_under_known_hash_seed(args)
            return _command(args.command)(args)
    except BrokenPipeError:
        # Whoever read our output has gone; say nothing more to it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:
        from kvfault.faults.errors import KvfaultError, KvfaultOSError, report

        if isinstance(exc, KvfaultError):  # every error of kvfault's own: one line, its code
            _disarm_guards()  # one raised mid-campaign leaves no hang guard armed
            return report(exc)
        if isinstance(exc, OSError):  # a place that cannot be written, a full disk or stdout
            return report(KvfaultOSError(exc.errno, exc.strerror or str(exc), exc.filename))
        raise


def _stopped(exc: KeyboardInterrupt) -> int:
    """A stop: what the command started is stopped, one line names the signal, and the
    exit code is 128 + signum."""
    import signal

    from kvfault.faults.processes import Interrupted, stop_descendants

    _disarm_guards()
    stop_descendants()
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    _say(f"kvfault: interrupted by {signal.Signals(signum).name}")
    return 128 + signum


def _run_under_known_hash_seed(args: argparse.Namespace) -> None:
    """``repro``, ``replay`` and ``run`` run under a PYTHONHASHSEED they know, so every
    artifact records the hash order its case ran in and a replay gets it back: replay
    the artifact's; repro the one set, else 0; run the one set, else a fresh random one
    (runs still vary, each one recorded). Where this process's differs, or is random,
    the same command line is executed again in its place under that seed (``exec``:
    same process id, signals and exit status)."""
    from kvfault.faults.campaign.artifacts import hashseed
    from kvfault.faults.repro import wanted_hash_seed

    wanted = wanted_hash_seed(args.command, getattr(args, "artifact", None))
    if wanted is None or wanted == hashseed():
        return
    env = {**os.environ, "PYTHONHASHSEED": wanted}
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        from kvfault.reference.signals import stop_signals_blocked

        # Blocked across the exec (a mask survives it): the new interpreter's own start
        # cannot be cut, and its main() takes a pending stop once its handlers are in.
        with stop_signals_blocked():  # the mask comes back only where the exec failed
            os.execve(sys.executable, argv, env)
    import subprocess

    raise SystemExit(subprocess.call(argv, env=env))


def _say(line: str) -> None:
    """One line on stderr, if stderr can take it (it may be closed or full)."""
    from kvfault.faults.errors import unwritable_dropped

    with unwritable_dropped(sys.stderr):
        print(line, file=sys.stderr, flush=True)


def _disarm_guards() -> None:
    import faulthandler

    faulthandler.cancel_dump_traceback_later()
    if "kvfault.faults.campaign.hang_guard" in sys.modules:
        sys.modules["kvfault.faults.campaign.hang_guard"].disarm_hang_guard()


if __name__ == "__main__":
    from kvfault.faults.processes import adopt_orphans

    adopt_orphans()  # as the console script does (faults.entry)
    raise SystemExit(main(program=True))
