"""The one campaign loop: every ``kvfault run``, ``repro`` and ``replay`` goes through a
``Session`` (``repro`` keeps a passing case's artifact too), and so does each work
item on a pytest-xdist worker.

A session owns every job around a case that does not depend on where the case runs,
each written once here:

- **budget**: no seed starts once ``budget_s`` seconds (by ``clock``) have passed; a
  seed that started runs whole (every target), and the first seed always runs
  (``always_runs``: the one place that rule is written; the backends ask for it);
- **artifacts**: a case's replay artifact is staged before it runs and kept or dropped
  when its outcome is back (``kvfault.faults.campaign.artifacts.CampaignArtifacts``); when the
  campaign is interrupted, every staged case with no outcome has its staging undone.
  A stop signal is held while a staging or an outcome is recorded, so it lands between
  them, never inside one (which would leave a passing case's artifact behind);
- **progress**: ``progress(done, total, label)`` as each case starts (``label`` its id)
  and once at the end (``"done"``);
- **the hang guard** around a case (``--timeout``): in this process it ends the run
  after ``on_hang`` has seen what ran; in a worker it ends the worker;
- **a dead worker**: the case it was running becomes an ERROR outcome (``lost``;
  which case, and what runs again, is ``dead_worker.DeadWorker``'s rule, which the
  backends with workers share);
- the garbage collector's settings, and the outcomes put back in campaign order
  (target by target, each over its seeds), whatever order they arrived in.

A *backend* only says where the cases run and calls the session's hooks
(``may_start``, ``stage``, ``starting``, ``run_here`` or its pool workers' ``guarded``,
``finished``, and ``lost`` through ``DeadWorker``). An interrupt that comes out of a
backend's ``run`` is the session's to clean up (``interrupted``). The backends:

- ``InProcess`` (``-j 1``, a tier that runs in one process): this process, on a tier's executor;
- ``kvfault.faults.campaign.pool.ForkPool`` (``-j N``): forked workers on this machine;
- ``kvfault.faults.campaign.xdist.Xdist`` (``-n N``, ``--tx``): pytest-xdist workers or
  execnet gateways.

Every backend gives the same table, verdicts, digests and exit status
(``cpu_tests/faults/campaign/test_backends.py``).
"""

from __future__ import annotations

import contextlib
import gc
import signal
import time
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from kvfault.faults.argtypes import MAX_SEED
from kvfault.faults.campaign.execute import Executor
from kvfault.faults.campaign.hang_guard import hang_guard
from kvfault.faults.campaign.outcomes import (
    CampaignFailure,
    CampaignResult,
    CaseOutcome,
    in_campaign_order,
)
from kvfault.faults.campaign.runner import CaseRunner
from kvfault.faults.campaign.targets import Case, Target
from kvfault.faults.errors import UsageError
from kvfault.faults.verdicts import Verdict
from kvfault.reference.signals import stop_signals_held

# (cases done, cases in all, the case starting ("" where unknown), or "done" at the end)
Progress = Callable[[int, int, str], None]

# What ends a case with no verdict to keep, so its staged artifact is undone: Ctrl-C and
# the stop signals (``faults.processes.Interrupted`` is a ``KeyboardInterrupt``) and a
# ``SystemExit`` (a forked worker's SIGTERM unwinds as one: ``pool.stop_on_sigterm``). Any other
# exception out of a case is a crash of kvfault itself: the case keeps its staged
# artifact, so the crash can be replayed.
INTERRUPTS = (KeyboardInterrupt, SystemExit)


class Artifacts(Protocol):
    """Where replay artifacts go (``kvfault.faults.campaign.artifacts.CampaignArtifacts``):
    ``before`` stages a case's artifact and returns a token; ``after`` keeps or drops
    it once the outcome is known (token None: the case ran where this process could
    not stage it); ``abandon`` undoes a staging whose case will have no outcome."""

    directory: Any

    def before(self, case: Case) -> Any: ...

    def after(self, case: Case, outcome: CaseOutcome, token: Any) -> None: ...

    def abandon(self, token: Any) -> None: ...


class Backend(Protocol):
    """Where a session's cases run: ``run`` runs them through the session's hooks."""

    def run(self, session: Session) -> None: ...


class Session:
    """One campaign run: the targets over the seeds, and the hooks every backend calls.
    ``on_hang(result)`` sees the run cut short by a case of this process that ran past
    ``timeout_s`` (that case an ERROR, a ``timeout`` campaign failure) before the
    process exits with 2; ``on_interrupt(result)`` sees what had finished when a stop
    signal or Ctrl-C ended the campaign (an ``interrupted`` campaign failure), before
    the interrupt goes on up."""

    def __init__(
        self,
        targets: Sequence[Target],
        seeds: Sequence[int],
        *,
        artifacts: Artifacts | None = None,
        progress: Progress | None = None,
        budget_s: float | None = None,
        timeout_s: float | None = None,
        keep_runs: str = "failing",
        digests: bool = True,
        clock: Callable[[], float] = time.monotonic,
        on_hang: Callable[[CampaignResult], object] | None = None,
        on_interrupt: Callable[[CampaignResult], object] | None = None,
    ):
        self.targets, self.seeds = list(targets), _seeds(seeds)
        self.total = len(self.targets) * len(self.seeds)
        self.artifacts, self.progress, self.on_hang = artifacts, progress, on_hang
        self.on_interrupt = on_interrupt
        self.budget_s, self.timeout_s, self.clock = budget_s, timeout_s, clock
        self.keep_runs, self.digests = keep_runs, digests
        self.done: dict[tuple[str, int], CaseOutcome] = {}
        # Staged artifacts of the cases with no outcome yet (their tokens).
        self._staged: dict[tuple[str, int], Any] = {}
        self.started: set[int] = set()  # seeds started: a started seed runs whole
        self._count = 0  # cases started
        self._shown: tuple[int, int] | None = None
        self._t0, self._start = time.perf_counter(), clock()

    # -- the hooks ---------------------------------------------------------------------

    @property
    def always_runs(self) -> int | None:
        """The seed that runs whatever the budget: the first (a spent budget still
        judges one seed, so a campaign never passes on nothing). None: no seeds."""
        return self.seeds[0] if self.seeds else None

    def may_start(self, seed: int) -> bool:
        """Whether a case of ``seed`` may start now (the budget), marking it started."""
        if (
            self.budget_s is not None
            and seed not in self.started
            and seed != self.always_runs
            and self.clock() - self._start >= self.budget_s
        ):
            return False
        self.started.add(seed)
        return True

    def runner(self, executor: Executor | None = None) -> CaseRunner:
        """A case runner with this session's settings (on ``executor``'s tier)."""
        return CaseRunner(keep_runs=self.keep_runs, executor=executor, digests=self.digests)

    def stage(self, case: Case) -> None:
        """Stage ``case``'s replay artifact before it runs (once: a case staged already,
        handed out again after its worker died, keeps its staging)."""
        key = (case.target.id, case.seed)
        if self.artifacts is None or key in self._staged:
            return
        with stop_signals_held():
            self._staged[key] = self.artifacts.before(case)

    def starting(self, case: Case) -> None:
        """``case`` starts: progress counts the cases done by now."""
        self._count += 1
        self.show(len(self.done), self.total, case.id)

    def show(self, done: int, total: int, label: str) -> None:
        """Report progress (a backend that learns only of finished work calls it as
        outcomes arrive); the closing ``done, done`` is reported once."""
        if self.progress is not None and (done, total) != self._shown:
            self._shown = (done, total) if done == total else None
            self.progress(done, total, label)

    def interrupted(self) -> None:
        """The campaign was interrupted (``INTERRUPTS``): every staged case with no
        outcome goes as a pass's would, since it has no verdict to keep. A case that
        hangs, whose worker dies, or that crashes kvfault is not this: it keeps its
        artifact, for a replay."""
        with stop_signals_held():
            while self._staged:
                _, token = self._staged.popitem()
                if self.artifacts is not None and token is not None:
                    self.artifacts.abandon(token)

    def finished(self, case: Case, outcome: CaseOutcome) -> None:
        """``case``'s outcome is back: record it, keep or drop its artifact."""
        with stop_signals_held():
            self.started.add(case.seed)
            key = (case.target.id, case.seed)
            self.done[key] = outcome
            token = self._staged.pop(key, None)
            if self.artifacts is not None:
                self.artifacts.after(case, outcome, token)

    def lost(
        self, case: Case, cause: str, error: str | None = None, timed_out: bool = False
    ) -> None:
        """The worker running ``case`` died: an ERROR outcome. ``timed_out``: its hang
        guard ended it (the case ran past ``timeout_s``), else it crashed (``cause``)."""
        if timed_out:
            why = f"ran past --timeout {self.timeout_s or 0.0:g}s (its worker's stacks on stderr)"
        else:
            why = f"the worker running it failed: {cause}"
        timeout = self.timeout_s if timed_out else None
        outcome = CaseOutcome(case, Verdict.ERROR, signature=why, error=error, timeout_s=timeout)
        self.finished(case, outcome)

    def run_here(self, runner: CaseRunner, case: Case) -> CaseOutcome:
        """Run ``case`` in this process under the hang guard: past ``timeout_s``,
        ``on_hang`` sees the run cut short and the process exits with 2."""
        with hang_guard(self.timeout_s, lambda: self._hung(case)):
            return runner.run(case)

    def _hung(self, case: Case) -> None:
        timeout = self.timeout_s or 0.0
        hung = CaseOutcome(
            case,
            Verdict.ERROR,
            signature=f"ran past --timeout {timeout:g}s (stacks on stderr)",
            timeout_s=timeout,
        )
        result = self.cut_short(
            "timeout",
            f"{case.id} ran past --timeout {timeout:g}s and ended the run",
            {(case.target.id, case.seed): hung},
        )
        token = self._staged.pop((case.target.id, case.seed), None)
        if self.artifacts is not None:
            self.artifacts.after(case, hung, token)
        if self.on_hang is not None:
            self.on_hang(result)

    def cut_short(
        self, kind: str, why: str, more: Mapping[tuple[str, int], CaseOutcome] | None = None
    ) -> CampaignResult:
        """What had finished (and ``more``) when the campaign ended early: a campaign
        failure ``kind`` (an ERROR) that says ``why`` and how many cases never ran."""
        ran = {**self.done, **(more or {})}
        message = f"{why}: {self.total - len(ran)} of {self.total} cases never ran"
        failure = CampaignFailure(kind, Verdict.ERROR, message)
        rows = [t for t in in_campaign_order(self.targets, self.seeds, ran) if t.cases]
        return CampaignResult(rows, time.perf_counter() - self._t0, stopped=[failure])

    def report_interrupt(self, exc: BaseException) -> None:
        """Hand ``on_interrupt`` what had finished when ``exc`` (an ``INTERRUPTS``)
        ended the campaign. A report that cannot be written (a closed stdout) does
        not replace the interrupt."""
        if self.on_interrupt is None:
            return
        with contextlib.suppress(OSError):
            self.on_interrupt(self.cut_short("interrupted", interrupted_by(exc)))

    def result(self) -> CampaignResult:
        """What ran, in campaign order over the seeds that started."""
        if self._count or self.done:
            n = max(self._count, len(self.done))
            self.show(n, n, "done")
        ran = [s for s in self.seeds if s in self.started]
        rows = in_campaign_order(self.targets, ran, self.done)
        return CampaignResult(rows, time.perf_counter() - self._t0)


def interrupted_by(exc: BaseException) -> str:
    """What ended a campaign, for its ``interrupted`` failure: the signal's name."""
    signum = getattr(exc, "signum", signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
    return f"interrupted by {signal.Signals(signum).name}" if signum else "stopped"


def _seeds(seeds: Sequence[int]) -> list[int]:
    """``seeds`` as campaign seeds: only what ``--seeds`` and ``--first-seed`` take."""
    out = list(seeds)
    for value in out:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
            raise UsageError(f"a seed is a whole number from 0 to {MAX_SEED}, got {value!r}")
    return out


def guarded(runner: CaseRunner, case: Case, timeout_s: float | None) -> CaseOutcome:
    """Run ``case`` in a worker under the hang guard: past ``timeout_s`` the worker
    prints every stack and exits, and its session turns the case into an ERROR."""
    with hang_guard(timeout_s):
        return runner.run(case)


class InProcess:
    """Every case in this process, on ``executor``'s tier (default: the default tier's), target
    by target; under a budget, seed by seed, each seed's fixed runs cached once (a
    soak stays small)."""

    def __init__(self, executor: Executor | None = None):
        self.executor = executor

    def run(self, session: Session) -> None:
        if session.budget_s is None:
            runner = session.runner(self.executor)
            for t in session.targets:
                for seed in session.seeds:
                    session.may_start(seed)
                    self._one(session, runner, Case(t, seed))
            return
        for seed in session.seeds:
            if not session.may_start(seed):
                break
            runner = session.runner(self.executor)
            for t in session.targets:
                self._one(session, runner, Case(t, seed))

    @staticmethod
    def _one(session: Session, runner: CaseRunner, case: Case) -> None:
        session.starting(case)
        session.stage(case)
        session.finished(case, session.run_here(runner, case))


def run_session(
    targets: Sequence[Target],
    seeds: Sequence[int],
    backend: Backend | None = None,
    **settings: Any,
) -> CampaignResult:
    """Run every target over every seed on ``backend`` (default: ``InProcess()``);
    ``settings`` are ``Session``'s (artifacts, progress, budget_s, timeout_s,
    keep_runs, digests, clock, on_hang, on_interrupt)."""
    session = Session(targets, seeds, **settings)
    with few_collections():
        try:
            (backend or InProcess()).run(session)
        except INTERRUPTS as exc:
            session.interrupted()
            session.report_interrupt(exc)
            raise
    return session.result()


def run_campaign(
    targets: Sequence[Target],
    seeds: Sequence[int],
    executor: Executor | None = None,
    **settings: Any,
) -> CampaignResult:
    """``run_session`` in this process, on ``executor``'s tier (default: the default tier's)."""
    return run_session(targets, seeds, InProcess(executor), **settings)


def seeds_ran(result: CampaignResult) -> list[int]:
    """The seeds the campaign ran, in order."""
    return sorted({c.case.seed for c in result.cases})


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
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
