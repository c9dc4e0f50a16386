"""A two-head proof's verdict as data (``kvfault prove``, ``kvfault.faults.prove``): the runs of
each side, the verdict rule as a pure function of them, and the report that renders
them. Only the standard library and ``kvfault.faults.verdicts``."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvfault.faults.verdicts import EXIT_CODES, Verdict


@dataclass
class SideRun:
    """One execution of CMD at one revision.

    ``returncode`` is None when the command never ran to an exit status (``error`` then
    says why: not found, timed out). ``matched`` is whether the full output matched
    ``--expect`` (None when no ``--expect`` was given). ``tail`` is the last lines of
    stdout and stderr interleaved as the command wrote them.
    """

    rev: str
    sha: str
    returncode: int | None
    seconds: float
    tail: str
    matched: bool | None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and self.returncode == 0


@dataclass
class ProofResult:
    """Everything ``kvfault prove`` found; ``exit_code`` is what the CLI exits with."""

    verdict: Verdict
    old: list[SideRun]
    new: list[SideRun]
    reason: str
    command: list[str] = field(default_factory=list)
    shell: bool = False
    expect: str | None = None
    old_rev: str = ""
    new_rev: str = ""
    old_sha: str = ""
    new_sha: str = ""
    repo: str = ""
    # One line each: the same commit on both sides, a dirty working tree, the worktree
    # paths a side's output names (removed after the proof).
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


# --------------------------------------------------------------------------- verdict


def outcome(side_run: SideRun) -> str:
    """The observable outcome of one run, as compared across ``--repeat`` runs.

    ``error``, ``pass``, or ``exit N`` plus, with ``--expect``, whether the output
    matched. Two runs of one side with different outcomes make that side FLAKY; a
    different exit status counts (pytest's 1 "tests failed" and 3 "internal error" are
    different behaviours), so does a failure that matches once and not the next time.
    """
    if side_run.error is not None:
        return "error"
    if side_run.returncode == 0:
        return "pass"
    status = f"exit {side_run.returncode}"
    if side_run.matched is None:
        return status
    return f"{status} (matches --expect)" if side_run.matched else f"{status} (no match)"


def _describe_counts(runs: Sequence[SideRun]) -> str:
    counts = Counter(outcome(r) for r in runs)
    return ", ".join(f"{n}x {name}" for name, n in counts.most_common())


# The exit status with which a command says it could not run the code under test
# (kvfault's "proved nothing": an import that fails, a tier that refuses the checkout).
UNJUDGED_EXITS = frozenset({2})


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def decide(
    old: Sequence[SideRun], new: Sequence[SideRun], unjudged: frozenset[int] = UNJUDGED_EXITS
) -> tuple[Verdict, str]:
    """The verdict rule, as a pure function of the runs of both sides.

    In order: any run that could not run (error), or a side without runs, gives ERROR
    (a proof stops at its first error, so the other side may have no runs); any run
    that exits with a status in ``unjudged`` (default 2: the command could not run the
    code under test) gives COULD NOT JUDGE, never a failure of that side; a side whose
    runs disagree gives FLAKY naming the side(s); new failing gives STILL FAILING (even
    when old passed: then the new head regressed); old passing, or old failing without
    matching ``--expect``, gives NOT REPRODUCED; otherwise FIXED. Returns (verdict,
    reason).
    """
    for side, runs in (("old", old), ("new", new)):
        for r in runs:
            if r.error is not None:
                return Verdict.ERROR, f"{side} ({r.rev} @ {r.sha[:12]}): {r.error}"
    if not old or not new:
        return Verdict.ERROR, "a side has no runs"
    for side, runs in (("old", old), ("new", new)):
        for r in runs:
            if r.returncode in unjudged:
                return Verdict.COULD_NOT_JUDGE, (
                    f"{side} ({r.rev} @ {r.sha[:12]}) exited {r.returncode}: it could not "
                    f"run the code under test ({_last_line(r.tail)})"
                )

    flaky = [
        (side, runs)
        for side, runs in (("old", old), ("new", new))
        if len({outcome(r) for r in runs}) > 1
    ]
    if flaky:
        names = " and ".join(side for side, _ in flaky)
        detail = "; ".join(f"{side}: {_describe_counts(runs)}" for side, runs in flaky)
        verb = "disagree with themselves" if len(flaky) > 1 else "disagrees with itself"
        return Verdict.FLAKY, f"{names} {verb} ({detail})"

    # Every run of a side now has the same outcome, so the first stands for all.
    o, n = old[0], new[0]
    if not n.passed:
        reason = f"new fails (exit {n.returncode})"
        if o.passed:
            reason += "; old passes, so the new head regressed"
        return Verdict.STILL_FAILING, reason
    if o.passed:
        return Verdict.NOT_REPRODUCED, "old passes (exit 0); nothing to fix"
    if o.matched is False:
        return (
            Verdict.NOT_REPRODUCED,
            f"old fails (exit {o.returncode}) but its output does not match --expect",
        )
    how = ", output matches --expect" if o.matched else ""
    return Verdict.FIXED, f"old fails (exit {o.returncode}{how}) and new passes"


def _run_line(side: str, i: int, total: int, r: SideRun) -> str:
    status = r.error if r.error is not None else f"exit {r.returncode}"
    line = f"{side} {r.rev} ({r.sha[:12]}) run {i}/{total}: {status}, {r.seconds:.2f} s"
    if r.matched is not None and not r.passed:  # a signature only matters on failure
        line += ", output matches --expect" if r.matched else ", output does not match --expect"
    return line


def format_report(result: ProofResult) -> str:
    """The human-readable report: header, each run with output tails, the verdict last.

    For each side the tail of the first run of each distinct outcome is shown (so a
    FLAKY side shows both behaviours); repeated identical outcomes show one line each.
    """
    cmd = result.command[0] if result.shell else shlex.join(result.command)
    mode = "via /bin/sh -c" if result.shell else "exec, no shell"
    out = [
        f"kvfault prove in {result.repo}",
        f"  old:     {result.old_rev} = {result.old_sha[:12]}",
        f"  new:     {result.new_rev} = {result.new_sha[:12]}",
        f"  command: {cmd}  ({mode}; cwd = worktree root)",
    ]
    if result.expect is not None:
        out.append(f"  expect:  /{result.expect}/")
    out.extend(f"  note:    {n}" for n in result.notes)
    for side, runs in (("old", result.old), ("new", result.new)):
        first_run_of: dict[str, int] = {}
        for i, r in enumerate(runs, 1):
            out.append("")
            out.append(f"== {_run_line(side, i, len(runs), r)}")
            if outcome(r) in first_run_of:
                out.append(
                    f"   (same outcome as run {first_run_of[outcome(r)]}; output not repeated)"
                )
                continue
            first_run_of[outcome(r)] = i
            out.extend(f"   | {line}" for line in (r.tail.splitlines() or ["(no output)"]))
    total = sum(r.seconds for r in (*result.old, *result.new))
    out.append("")
    out.append(f"{result.verdict.value}: {result.reason}  [{total:.2f} s of runs]")
    return "\n".join(out)
