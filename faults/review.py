"""``kvfault review BASE HEAD``: a reviewer's per-row verdict on a pull request.

Run inside the checkout of the code under test (ATOM's for ``--tier atom``, kvfault's
own for the in-process tier). Both revisions are checked out in temporary worktrees
(removed however the run ends), the tier's campaign runs on each, and every row is
compared: the rows this PR breaks, fixes, that fail on both (known), that are unstable
(a row whose verdict differs between the sides is re-run K times on each side first),
and that could not be judged. The summary is markdown for the pull request; ``--report
DIR`` keeps both sides' reports. Exit status (``kvfault.faults.verdicts``): FIXED 0, REGRESSED
1, COULD NOT JUDGE 2 (and bad arguments), UNCHANGED 3; 130/143/129 on a stop signal.

The sides may also differ by arguments on one commit (``--head-args '--atom-fix
NAME'``): an A/B of one change that names which rows it flips.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kvfault.faults.prove import (
    ProveError,
    _check_repo,
    _clean_env,
    _git,
    _resolve,
    _run_once,
    hide_worktree,
    hide_worktree_in_file,
    notes,
    side_worktrees,
)
from kvfault.faults.review_diff import (
    KNOWN,
    PASS,
    UNJUDGED,
    Row,
    RowDiff,
    Side,
    SummaryError,
    as_json,
    decide,
    diff,
    finding_anchor,
    markdown,
    read_rows,
)
from kvfault.faults.verdicts import Verdict

DEFAULT_RERUNS = 2
DEFAULT_SIDE_TIMEOUT_S = 3600.0
# Every side runs under one hash seed (the caller's, else this): the two sides then
# differ by their code, not by hash order.
DEFAULT_HASHSEED = "0"

# The run options that pick rows; a re-run of one row drops them and names its own.
_SELECTION_FLAGS = {
    "--regression": 1, "--fault": 1, "--scenario": 1, "--swarm": 0, "--pin": 1, "--full": 0,
}  # fmt: skip


class ReviewError(ProveError):
    """A bad argument or a setup failure: one line, exit 2."""


@dataclass
class SideSpec:
    """One side: ``name`` (base, head), the revision as given and its commit, and the
    extra ``kvfault run`` words it alone gets."""

    name: str
    rev: str
    sha: str
    args: list[str]
    worktree: Path | None = None


@dataclass
class SideResult:
    spec: SideSpec
    code: str = ""
    returncode: int | None = None
    rows: dict[str, Row] = field(default_factory=dict)
    unjudged: str | None = None  # why this side could not run the code under test
    tail: str = ""


@dataclass
class ReviewResult:
    verdict: Verdict
    reason: str
    markdown: str
    sides: list[SideResult]
    rows: list[RowDiff]

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _strip_selection(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(words):
        flag, _, inline = words[i].partition("=")
        if flag in _SELECTION_FLAGS:
            i += 1 if inline or not _SELECTION_FLAGS[flag] else 2
            continue
        out.append(words[i])
        i += 1
    return out


def row_selection(target: dict[str, Any]) -> list[str]:
    """The ``kvfault run`` words that pick exactly the row of ``target`` (its JSON in
    the summary), as its kind selects it (``--fault NAME``, ``--swarm --scenario NAME``);
    a row this kvfault does not know is picked by its kind's flag and name."""
    from kvfault.faults.campaign.kinds import kind_named

    try:
        kind = kind_named(target.get("kind"))
        built = kind.build(str(target.get("name")), str(target.get("tier")), target)
        return kind.selection(built)
    except Exception:  # noqa: BLE001 - a row of another kvfault version
        return [f"--{target.get('kind')}", str(target.get("name"))]


class Reviewer:
    """Runs one review: the tier's campaign on each side, the re-runs, the diff. The
    worktrees and scratch reports live under ``tmp``; ``report`` (None: scratch) keeps
    each side's campaign reports."""

    def __init__(
        self,
        *,
        repo: Path,
        tier: str,
        run_words: list[str],
        reruns: int,
        side_timeout: float | None,
        report: Path | None,
        tmp: Path,
        progress: TextIO | None,
    ) -> None:
        from kvfault.faults.tiers import Tiers

        self.repo, self.tier, self.run_words = repo, Tiers.installed()[tier], run_words
        self.reruns, self.side_timeout, self.progress = reruns, side_timeout, progress
        self.tmp = tmp
        self.report = report if report is not None else tmp / "report"

    # ------------------------------------------------------------------ one run

    def _say(self, text: str) -> None:
        if self.progress is not None:
            print(f"kvfault review: {text}", file=self.progress, flush=True)

    def _env(self, spec: SideSpec) -> dict[str, str]:
        env = _clean_env()
        env.setdefault("PYTHONHASHSEED", DEFAULT_HASHSEED)
        if env["PYTHONHASHSEED"] in ("", "random"):
            env["PYTHONHASHSEED"] = DEFAULT_HASHSEED
        assert spec.worktree is not None
        # Each side's checkout is its worktree, whatever the caller exported.
        for t_opt in self.tier.options:
            if t_opt.env:
                env[t_opt.env] = str(spec.worktree)
        if self.tier.source == "kvfault":  # the side's own kvfault, not the installed one
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(spec.worktree), env.get("PYTHONPATH", "")) if p
            )
            env.pop("PYTHONSAFEPATH", None)
        return env

    def _argv(self, spec: SideSpec, words: list[str], report: Path) -> list[str]:
        argv = [sys.executable, "-m", "kvfault.faults.cli", "run", "--no-progress"]
        if self.tier.source != "kvfault":
            argv += ["--tier", self.tier.name]
        opt = self.tier.source_option
        if opt is not None:
            argv += [opt.flag, str(spec.worktree)]
        return [*argv, "--report", str(report), *words, *spec.args]

    def _cwd(self, spec: SideSpec) -> Path:
        # kvfault's own tier runs from the worktree (its packages first on sys.path);
        # an engine's side runs the installed kvfault from a scratch directory.
        assert spec.worktree is not None
        return spec.worktree if self.tier.source == "kvfault" else self.tmp

    def _campaign(
        self, spec: SideSpec, words: list[str], report: Path
    ) -> tuple[int | None, str, str | None]:
        """Run one campaign; returns (exit status, output tail, why it could not run)."""
        log = report.parent / f"{report.name}.log"
        r = _run_once(
            command=self._argv(spec, words, report),
            shell=False,
            cwd=self._cwd(spec),
            env=self._env(spec),
            timeout=self.side_timeout,
            log_path=log,
            expect=None,
            tail_lines=12,
            rev=spec.rev,
            sha=spec.sha,
        )
        assert spec.worktree is not None
        # The log is kept with --report; its replay lines must not name a removed worktree.
        hide_worktree_in_file(log, spec.worktree, spec.name)
        return r.returncode, r.tail, r.error

    def _preflight(self, spec: SideSpec) -> str | None:
        """Why this side cannot run kvfault's own code from its worktree (None: it can):
        the in-process tier's code under test is the side's kvfault."""
        if self.tier.source != "kvfault":
            return None
        assert spec.worktree is not None
        log = self.tmp / f"{spec.name}-import.log"
        probe = "import kvfault.faults.cli as cli; print(cli.__file__)"
        r = _run_once(
            command=[sys.executable, "-c", probe], shell=False, cwd=spec.worktree,
            env=self._env(spec), timeout=120, log_path=log, expect=None, tail_lines=1,
            rev=spec.rev, sha=spec.sha,
        )  # fmt: skip
        if r.error or r.returncode != 0:
            return f"cannot import kvfault at {spec.rev}: {r.error or r.tail.strip()}"
        where = Path(r.tail.strip()).resolve()
        if spec.worktree.resolve() not in where.parents:
            return f"{spec.rev} imports kvfault from {where}, not from its worktree"
        return None

    # ----------------------------------------------------------------- the sides

    def side(self, spec: SideSpec) -> SideResult:
        out = SideResult(spec)
        out.code = self.code(spec)
        why = self._preflight(spec)
        if why:
            out.unjudged = why
            return out
        report = self.report / spec.name
        report.parent.mkdir(parents=True, exist_ok=True)
        self._say(f"{spec.name} {spec.rev} ({spec.sha[:12]}): the campaign ...")
        code, tail, error = self._campaign(spec, self.run_words, report)
        out.returncode, out.tail = code, tail
        if error is not None:
            out.unjudged = f"{spec.name} {spec.rev}: {error}"
            return out
        try:
            out.rows = read_rows(report / "summary.json")
        except SummaryError as exc:
            last = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "no output")
            out.unjudged = (
                f"{spec.name} {spec.rev} ({spec.sha[:12]}) could not run the code under test "
                f"(exit {code}): {last.strip()}"
            )
            if code in (0, 1):  # it judged, but left no report we can read
                out.unjudged = f"{spec.name} {spec.rev}: {exc}"
            return out
        if out.rows and all(r.outcome == UNJUDGED for r in out.rows.values()):
            first = next(iter(out.rows.values()))
            out.unjudged = (
                f"{spec.name} {spec.rev} ({spec.sha[:12]}): every row is ERROR, "
                f"e.g. {first.id}: {first.first}"
            )
        return out

    def code(self, spec: SideSpec) -> str:
        """What the side runs, in one phrase: the engine and the commit of its worktree."""
        from kvfault.faults.provenance import checkout

        assert spec.worktree is not None
        engine = self.tier.engine or "kvfault"
        c = checkout(str(spec.worktree), engine)
        return f"{engine} {spec.sha[:12]}" + (" (its worktree)" if c.commit == spec.sha else
                                               f" (worktree at {c.commit})")  # fmt: skip

    def rerun(
        self, base: SideSpec, head: SideSpec, rows: list[Row]
    ) -> dict[str, tuple[list[str], list[str]]]:
        """Run ``rows`` (together, in one campaign) ``reruns`` times on each side; each
        row's outcome in each run, by row id (a row a run did not report could not be
        judged in that run)."""
        words = _strip_selection(self.run_words)
        for r in rows:
            words += row_selection(r.target)
        got: dict[str, tuple[list[str], list[str]]] = {r.id: ([], []) for r in rows}
        names = ", ".join(r.id for r in rows)
        for n, spec in enumerate((base, head)):
            for i in range(1, self.reruns + 1):
                self._say(f"re-run {i}/{self.reruns} on {spec.name} of what differs: {names}")
                report = self.report / "reruns" / f"{spec.name}-{i}"
                report.parent.mkdir(parents=True, exist_ok=True)
                _code, _tail, error = self._campaign(spec, words, report)
                try:
                    ran = read_rows(report / "summary.json") if error is None else {}
                except SummaryError:
                    ran = {}
                for r in rows:
                    got[r.id][n].append(ran[r.id].outcome if r.id in ran else UNJUDGED)
        return got


def _notes(repo: Path, base: SideSpec, head: SideSpec) -> list[str]:
    """One line each (``kvfault.faults.prove.notes``): the same commit on both sides (an A/B of
    arguments when their arguments differ), a dirty working tree."""
    said = notes(repo, ("base", base.sha), ("head", head.sha))
    if base.sha == head.sha and base.args != head.args:
        said[0] = f"both sides run commit {base.sha[:12]}; they differ by their arguments"
    return said


def review(
    repo: str | os.PathLike[str],
    base: str,
    head: str,
    *,
    tier: str,
    run_words: Sequence[str] = (),
    base_args: Sequence[str] = (),
    head_args: Sequence[str] = (),
    reruns: int = DEFAULT_RERUNS,
    side_timeout: float | None = DEFAULT_SIDE_TIMEOUT_S,
    report: Path | None = None,
    progress: TextIO | None = None,
    command: str = "",
) -> ReviewResult:
    """Review HEAD against BASE in the repository at ``repo`` on ``tier``: each side's
    campaign (``kvfault run`` with ``run_words`` and its own extra args) in its own
    worktree, then the per-row diff. Raises ``ReviewError``/``ProveError`` for bad
    arguments and setup failures, ``Interrupted`` on a stop signal; the worktrees are
    removed in every case."""
    from kvfault.faults.tiers import Tiers

    on = Tiers.installed()[tier]
    if not on.source:
        raise ReviewError(
            f"--tier {tier} tests installed packages, not a checkout: review compares two "
            f"commits of a checkout (--tier {' or --tier '.join(t.name for t in Tiers.installed() if t.source)})"
        )
    repo_path = Path(repo).resolve() if Path(repo).exists() else Path(repo)
    _check_repo(repo_path)
    top = _git(repo_path, "rev-parse", "--show-toplevel").stdout.strip()
    repo_path = Path(top) if top else repo_path
    specs = (
        SideSpec("base", base, _resolve(repo_path, "base", base), list(base_args)),
        SideSpec("head", head, _resolve(repo_path, "head", head), list(head_args)),
    )
    notes = _notes(repo_path, *specs)
    for n in notes:
        if progress is not None:
            print(f"kvfault review: note: {n}", file=progress, flush=True)
    with side_worktrees(repo_path, [(s.name, s.sha) for s in specs], "kvfault-review-") as tmp:
        for spec in specs:
            spec.worktree = tmp / spec.name
        rv = Reviewer(
            repo=repo_path, tier=tier, run_words=list(run_words), reruns=reruns,
            side_timeout=side_timeout, report=report, tmp=tmp, progress=progress,
        )  # fmt: skip
        # The head first: a pull request that breaks the checkout is told in
        # seconds, and then the base's campaign is not run at all.
        head_side = rv.side(specs[1])
        base_side = (
            rv.side(specs[0])
            if not head_side.unjudged
            else SideResult(specs[0], code=rv.code(specs[0]))
        )
        sides = [base_side, head_side]
        # A side's message may name its worktree, which is gone once we return.
        unjudged = "; ".join(
            hide_worktree(s.unjudged, s.spec.worktree, s.spec.name)
            for s in sides
            if s.unjudged and s.spec.worktree is not None
        )
        rows: list[RowDiff] = []
        if not unjudged:
            rows = diff(sides[0].rows, sides[1].rows, lambda rs: rv.rerun(*specs, rs))
    _point_at_findings(on, rows)
    verdict, reason = decide(rows, unjudged or None)
    summary = [
        Side(s.spec.name, s.spec.rev, s.spec.sha, s.spec.args, s.code, s.returncode,
             len(s.rows), sum(r.outcome != PASS for r in s.rows.values()))
        for s in sides
    ]  # fmt: skip

    def replay(d: RowDiff) -> str:
        row = d.head or d.base
        assert row is not None
        words = [*_strip_selection(run_words), *row_selection(row.target)]
        return _command_line(specs[0].sha[:12], specs[1].sha[:12], tier, words,
                             base_args, head_args)  # fmt: skip

    text = markdown(
        command=command or _command_line(base, head, tier, run_words, base_args, head_args),
        sides=summary, rows=rows, verdict=verdict, reason=reason, replay=replay, notes=notes,
    )  # fmt: skip
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        (report / "review.md").write_text(text + "\n", encoding="utf-8", errors="backslashreplace")
        obj = as_json(verdict, reason, summary, rows)
        (report / "review.json").write_text(
            json.dumps(obj, indent=2) + "\n", encoding="utf-8", errors="backslashreplace"
        )
    return ReviewResult(verdict, reason, text, sides, rows)


def _point_at_findings(tier: Any, rows: list[RowDiff]) -> None:
    """A known row names the entry of the tier's findings page that is about it."""
    from kvfault.faults.provenance import kvfault_root

    if not getattr(tier, "findings", ""):
        return
    doc = Path(kvfault_root()) / tier.findings
    for d in rows:
        if d.status == KNOWN and d.head is not None:
            d.finding = finding_anchor(doc, str(d.head.target.get("name")), tier.findings)


def _command_line(
    base: str, head: str, tier: str, words: Sequence[str], base_args: Sequence[str],
    head_args: Sequence[str],
) -> str:  # fmt: skip
    argv = ["kvfault", "review", base, head, "--tier", tier]
    if base_args:
        argv += ["--base-args", shlex.join(base_args)]
    if head_args:
        argv += ["--head-args", shlex.join(head_args)]
    return shlex.join([*argv, *words])


# --------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``kvfault review``'s options on ``parser``; the ``kvfault run`` options it passes
    on to both sides are added by ``kvfault.faults.commands.run.add_tier_options`` and here."""
    from kvfault.faults import argtypes

    parser.add_argument("base", metavar="BASE", help="the revision the PR starts from")
    parser.add_argument("head", metavar="HEAD", help="the revision under review")
    parser.add_argument("--tier", default=None, metavar="TIER",
                        help="the tier whose campaign runs on both sides (default: memory, "
                             "kvfault's own; atom inside an ATOM checkout)")  # fmt: skip
    parser.add_argument("-k", "--reruns", type=argtypes.repeat, default=DEFAULT_RERUNS,
                        metavar="K", help="re-run a row whose verdict differs K times on "
                        f"each side before calling it a change (default {DEFAULT_RERUNS})")  # fmt: skip
    parser.add_argument("--report", type=argtypes.path, default=None, metavar="DIR",
                        help="keep both sides' reports (DIR/base, DIR/head, DIR/reruns) and "
                             "the summary (DIR/review.md, DIR/review.json)")  # fmt: skip
    parser.add_argument("-C", dest="repo", metavar="DIR", default=".",
                        help="the checkout of the code under test (default: here)")  # fmt: skip
    parser.add_argument("--base-args", "--old-args", default="", metavar="WORDS",
                        help="extra `kvfault run` words for the base side only (quoted)")  # fmt: skip
    parser.add_argument("--head-args", "--new-args", default="", metavar="WORDS",
                        help="extra `kvfault run` words for the head side only (quoted), e.g. "
                             "'--atom-fix NAME': an A/B of one change on one commit")  # fmt: skip
    parser.add_argument("--side-timeout", type=argtypes.prove_timeout,
                        default=DEFAULT_SIDE_TIMEOUT_S, metavar="S",
                        help="seconds one side's campaign may take (default "
                             f"{DEFAULT_SIDE_TIMEOUT_S:g}; 0: none)")  # fmt: skip
    for flag, help_ in (("--scenario", "review this scenario's row"),
                        ("--fault", "review this fault's row"),
                        ("--regression", "review this planted regression's row")):  # fmt: skip
        parser.add_argument(flag, action="append", default=None, metavar="NAME",
                            help=f"{help_} (repeatable; default: the whole campaign)")  # fmt: skip
    parser.add_argument("--full", action="store_true",
                        help="`kvfault run --full`: with no row named, the tier's long matrix "
                             "too")  # fmt: skip
    parser.add_argument("--seeds", "--seed-count", dest="seeds", type=argtypes.seed_count,
                        default=None, metavar="N", help="seeds per row (default: the tier's)")  # fmt: skip
    parser.add_argument("--first-seed", type=argtypes.seed, default=None, metavar="N",
                        help="first seed (default 0)")  # fmt: skip
    parser.add_argument("--timeout", type=argtypes.timeout_seconds, default=None, metavar="S",
                        help="`kvfault run --timeout`: a case past S seconds is an ERROR")  # fmt: skip
    parser.add_argument("run_args", nargs="*", metavar="-- RUN WORDS",
                        help="any other `kvfault run` words for both sides")  # fmt: skip


def _run_words(args: argparse.Namespace, tier: Any) -> list[str]:
    words: list[str] = []
    for flag, dest in (("--regression", "regression"), ("--fault", "fault"),
                       ("--scenario", "scenario")):  # fmt: skip
        for v in getattr(args, dest) or []:
            words += [flag, v]
    if getattr(args, "full", False):
        words.append("--full")
    if args.first_seed is not None:
        words += ["--first-seed", str(args.first_seed)]
    if args.seeds is not None:
        words += ["--seeds", str(args.seeds)]
    if args.timeout is not None:
        words += ["--timeout", f"{args.timeout:g}"]
    for opt in tier.options:
        if opt.flag == tier.source:
            continue
        value = getattr(args, opt.dest, None)
        for v in (value or []) if opt.repeat else ([] if value is None else [value]):
            words += [opt.flag, str(v)]
    rest = list(args.run_args or [])
    if rest and rest[0] == "--":
        rest = rest[1:]
    return words + rest


def _split(text: str, flag: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ReviewError(f"{flag} {text!r}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Run the review ARGS describe; print the markdown summary; return the exit code
    (FIXED 0, REGRESSED 1, COULD NOT JUDGE 2, UNCHANGED 3; bad arguments: one line, 2)."""
    from kvfault.faults.processes import Interrupted
    from kvfault.faults.tiers import TierError, Tiers, default_tier

    try:
        tier = args.tier or default_tier()
        try:
            on = Tiers.installed()[tier]
        except TierError as exc:
            raise ReviewError(str(exc)) from None
        opt = on.source_option
        for other in Tiers.installed():
            for o in other.options:
                if getattr(args, o.dest, None) not in (None, []) and o not in on.options:
                    raise ReviewError(o.elsewhere or f"{o.flag} is for --tier {other.name}")
        if opt is not None and getattr(args, opt.dest, None) is not None:
            raise ReviewError(
                f"{opt.flag}: review runs each side on its own worktree of -C {args.repo}; "
                f"drop {opt.flag}"
            )
        if args.report is not None:
            from kvfault.faults.argtypes import dir_refused

            why = dir_refused(args.report, "--report")
            if why:
                raise ReviewError(why)
            # Each side's campaign runs elsewhere: the place must not depend on our cwd.
            args.report = args.report.absolute()
        base_args = _split(args.base_args, "--base-args")
        head_args = _split(args.head_args, "--head-args")
        for words, flag in ((base_args, "--base-args"), (head_args, "--head-args")):
            if opt is not None and any(w.split("=")[0] == opt.flag for w in words):
                raise ReviewError(f"{flag}: {opt.flag} is each side's worktree; drop it")
        result = review(
            args.repo, args.base, args.head, tier=tier, run_words=_run_words(args, on),
            base_args=base_args, head_args=head_args, reruns=args.reruns,
            side_timeout=args.side_timeout, report=args.report, progress=sys.stderr,
        )  # fmt: skip
    except ProveError as exc:
        print(f"kvfault review: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        print(f"kvfault review: interrupted by {name}; worktrees removed", file=sys.stderr)
        return 128 + signum
    print(result.markdown, flush=True)
    if args.report is not None:
        print(f"\nreport: {args.report / 'review.md'}, {args.report / 'base'}, "
              f"{args.report / 'head'}", flush=True)  # fmt: skip
    return result.exit_code
