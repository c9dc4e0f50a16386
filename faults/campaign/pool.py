"""The forked-pool backend of the campaign session (``kvfault run -j N``).

The pool only distributes and gathers: each worker is a fork of this process that runs
cases with the one ``CaseRunner`` (the same judge, properties and verdicts as a run in
one process) and sends each ``CaseOutcome`` back over a pipe. The session
(``kvfault.faults.campaign.session``) does the rest: the budget, artifacts, progress, the dead
worker's ERROR and the campaign order. The table, the verdicts, the reports, the
artifacts and the exit status are those of a run in one process.

The unit of work is every target on one scenario, scale and seed: those share a
workload and the fixed stack's run (a regression's fixed side is its scenario's plain
run), which one ``CaseRunner`` computes once per unit. Larger units go out first.

Workers are forked (they inherit the imported modules, the hash seed, the gc settings
and anything a caller patched, so their traces are this process's); they ignore SIGINT,
so Ctrl-C reaches this process alone, which then stops every worker before the
``KeyboardInterrupt`` goes on. A worker that dies in the middle of a case (its
``--timeout`` hang guard, a crash) leaves an ERROR outcome for that case; the rest of
its unit runs on a fresh worker (the shared rule, ``dead_worker.DeadWorker``).
"""

from __future__ import annotations

import copyreg
import faulthandler
import importlib
import io
import os
import pickle
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any, Sequence

from kvfault.faults.campaign.dead_worker import DeadWorker
from kvfault.faults.campaign.outcomes import CaseOutcome
from kvfault.faults.campaign.runner import ERROR, CaseRunner
from kvfault.faults.campaign.session import Session, guarded
from kvfault.faults.campaign.targets import Case, Target
from kvfault.faults.campaign.tiers import Opened
from kvfault.faults.processes import StopHandler
from kvfault.reference.signals import stop_signals_blocked, unblock_stop_signals
from kvfault.reference.trace import Trace

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether worker processes can be forked here (not on Windows)."""
    # Imported when asked: a run on a one-process tier or under -n never asks.
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def units(targets: Sequence[Target], seeds: Sequence[int]) -> list[list[Case]]:
    """The cases grouped into units of work, in the order they are handed out: per
    seed in order, each seed's units largest first (ties in campaign order). A unit is
    every target on one tier, scenario and scale with one seed, in campaign order."""
    out: list[list[Case]] = []
    for seed in seeds:
        groups: dict[tuple[str, tuple[str, ...], str, int], list[Case]] = {}
        for t in targets:
            key = (t.tier, t.options, t.scenario, t.scale)
            groups.setdefault(key, []).append(Case(t, seed))
        out += sorted(groups.values(), key=len, reverse=True)  # sorted() is stable
    return out


# -- sending outcomes back ---------------------------------------------------------------


def _trace_of(events: list[Any]) -> Any:
    last = events[-1].t if events else 0.0
    return Trace(lambda: last, None, events)


def _dumps(outcome: CaseOutcome) -> bytes:
    """A case's outcome as bytes that unpickle in the parent. A kept run (a failing
    case's, for its timeline) holds its trace, whose clock callbacks do not pickle: it
    travels as its events. If a run still cannot make the round trip, the outcome goes
    without its runs (no timeline); if even that fails, as an ERROR outcome that says
    why (``unsendable``), never as an exception in the worker."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {
        **copyreg.dispatch_table,
        Trace: lambda tr: (_trace_of, (tr.events,)),
    }
    try:
        pickler.dump(outcome)
        data = buf.getvalue()
        if outcome.legacy_result is not None or outcome.fixed_result is not None:
            pickle.loads(data)  # the runs hold the stack's objects: prove they come back
        return data
    except Exception as exc:  # noqa: BLE001 - any error a __reduce__ or __init__ raises
        if outcome.legacy_result is not None or outcome.fixed_result is not None:
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(
                f"kvfault: note: {outcome.case.id}: its runs could not come back from the "
                f"worker ({why}); no timeline",
                file=sys.stderr,
                flush=True,
            )
    outcome.legacy_result = outcome.fixed_result = None
    try:
        data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception as exc:  # noqa: BLE001
        return pickle.dumps(
            unsendable(outcome.case, exc, outcome), protocol=pickle.HIGHEST_PROTOCOL
        )


def unsendable(case: Case, exc: BaseException, outcome: CaseOutcome | None = None) -> CaseOutcome:
    """The ERROR outcome of a case whose outcome could not travel from its worker to
    this process (``exc`` says why); it names the verdict the worker had reached."""
    reached = f"; the worker had judged it {outcome.verdict}" if outcome is not None else ""
    if outcome is not None and outcome.signature:
        reached += f": {outcome.signature}"
    why = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return CaseOutcome(
        case,
        ERROR,
        signature=f"its outcome could not be sent back from the worker ({why}){reached}",
        wall_seconds=outcome.wall_seconds if outcome is not None else 0.0,
        error="".join(traceback.format_exception(exc)),
    )


# -- the worker side ---------------------------------------------------------------------


class _Unwind(SystemExit):
    """The parent's SIGTERM, unwinding a worker (exit status 128 + signum)."""


def stop_on_sigterm() -> None:
    """A worker's SIGTERM unwinds what runs (its finally blocks remove what it made),
    once (the cleanup is not cut short by another), even where the exception first
    lands in a callback that Python swallows it in (``StopHandler``)."""
    StopHandler(lambda signum: _Unwind(128 + signum)).install([signal.SIGTERM])


def _work(
    conn: Connection,
    others: list[Connection],
    keep_runs: str,
    timeout_s: float | None,
    digests: bool,
) -> None:
    """A worker's life: take a unit, run its cases one by one (announcing each), ask
    for more; exit when told to or when this process's parent has gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # so is a hangup
    # The parent's SIGTERM (stop) unwinds the running case, so its finally blocks
    # remove what it made (a kvfault-rpc-* directory) before this process goes.
    stop_on_sigterm()
    unblock_stop_signals()  # blocked by the parent's fork
    for c in others:  # the parent's ends of the other workers' pipes
        c.close()
    try:
        with Opened() as opened:  # closed before the exit below, and on SIGTERM's unwind
            _serve(conn, opened, keep_runs, timeout_s, digests)
    except (EOFError, OSError):  # the parent has gone (its end of the pipe is closed)
        pass
    os._exit(0)


def _serve(
    conn: Connection, opened: Opened, keep_runs: str, timeout_s: float | None, digests: bool
) -> None:
    """Take units until told to stop, running each on the executor of its cases' tier
    (every case of a unit shares its target's tier and options)."""
    while True:
        unit = conn.recv()
        if unit is None:
            return
        first = unit[0][1].target
        executor = opened.executor(first.tier, first.options)
        runner = CaseRunner(keep_runs=keep_runs, executor=executor, digests=digests)
        for i, case in unit:
            conn.send(("start", i))
            outcome = guarded(runner, case, timeout_s)
            conn.send_bytes(b"D" + i.to_bytes(8, "little") + _dumps(outcome))
        conn.send(("idle",))


# -- the parent side ---------------------------------------------------------------------


class _Worker:
    def __init__(self, process: BaseProcess, conn: Connection):
        self.process = process
        self.conn = conn
        self.unit: list[tuple[int, Case]] = []  # cases handed out and not yet done
        self.running: int | None = None  # the index of the case it runs now


class ForkPool:
    """The session's cases over ``jobs`` forked worker processes (fewer when there are
    fewer units of work), each opening the tier its cases run on (``Opened``). Units go out seed by seed, larger
    first; a worker runs each case under the hang guard (``session.timeout_s``).
    A worker that dies goes to the shared rule (``DeadWorker``: its running case
    is the ERROR); the rest of its unit goes to a fresh worker. ``KeyboardInterrupt`` (Ctrl-C) stops every worker
    before it goes on."""

    def __init__(self, jobs: int):
        self.jobs = jobs

    def run(self, session: Session) -> None:
        # Imported when asked: a run on a one-process tier or under -n never asks.
        import multiprocessing
        from multiprocessing.connection import wait

        jobs = self.jobs
        ctx = multiprocessing.get_context("fork")
        _warm()
        queue: list[list[tuple[int, Case]]] = []
        flat: list[Case] = []
        for unit in units(session.targets, session.seeds):
            queue.append([(len(flat) + k, c) for k, c in enumerate(unit)])
            flat += unit
        workers: list[_Worker] = []

        def spawn() -> None:
            parent_end, child_end = ctx.Pipe(duplex=True)
            others = [w.conn for w in workers] + [parent_end]
            sys.stdout.flush()
            sys.stderr.flush()
            # A fork inherits faulthandler's watchdog state but not its thread: a worker
            # whose parent had one armed (pytest's faulthandler_timeout) would wait for
            # ever for that thread when its hang guard cancels it. Cancel it here first.
            faulthandler.cancel_dump_traceback_later()
            args = (child_end, others, session.keep_runs, session.timeout_s, session.digests)
            proc = ctx.Process(target=_work, args=args, daemon=True)
            # Blocked across the fork: a stop that comes before the worker has its own
            # handlers waits for them (this process's would raise into multiprocessing's
            # start-up, which prints a traceback); here, it lands right after.
            with stop_signals_blocked():
                proc.start()
            child_end.close()
            workers.append(_Worker(proc, parent_end))

        def hand_out(w: _Worker) -> bool:
            while queue:
                if not session.may_start(queue[0][0][1].seed):
                    queue.clear()  # the budget is spent: no new seed
                    break
                unit = queue.pop(0)
                for _, case in unit:
                    session.stage(case)
                w.unit = list(unit)
                w.conn.send(unit)
                return True
            return False

        def lost(w: _Worker) -> None:
            # The worker died: the shared rule (``DeadWorker``) records a case and says
            # what goes back, at the head of the queue.
            w.process.join(5)
            running = flat[w.running] if w.running is not None else None
            dead = DeadWorker([c for _, c in w.unit], running, w.process.exitcode)
            rest = dead.settle(session)
            if rest:
                queue.insert(0, [(i, c) for i, c in w.unit if c in rest])
            w.conn.close()
            workers.remove(w)

        try:
            for _ in range(max(1, min(jobs, len(queue)))):
                spawn()
            for w in list(workers):
                if not hand_out(w):
                    _retire(w)
                    workers.remove(w)
            while workers:
                ready = wait([w.conn for w in workers])
                for w in [w for w in workers if w.conn in ready]:
                    try:
                        msg = w.conn.recv_bytes()
                    except (EOFError, OSError):
                        lost(w)
                        if queue and len(workers) < jobs:
                            spawn()
                            if not hand_out(workers[-1]):
                                _retire(workers.pop())
                        continue
                    if msg[:1] == b"D":
                        i = int.from_bytes(msg[1:9], "little")
                        w.running = None
                        w.unit = [(j, c) for j, c in w.unit if j != i]
                        try:
                            outcome = pickle.loads(msg[9:])
                        except Exception as exc:  # noqa: BLE001 - an outcome that will not load
                            outcome = unsendable(flat[i], exc)
                        session.finished(flat[i], outcome)
                        continue
                    kind = pickle.loads(msg)
                    if kind[0] == "start":
                        w.running = kind[1]
                        session.starting(flat[kind[1]])
                    elif not hand_out(w):  # idle, and nothing left to hand out
                        _retire(w)
                        workers.remove(w)
        finally:
            for w in workers:  # Ctrl-C, or an error here: stop every worker
                _stop(w)


def _warm() -> None:
    """Import here, once, what every worker's cases import (the scenarios, checks,
    legacy rules, and faker for the workloads), so no worker pays for it again."""
    for module in ("kvfault.faults.campaign.execute", "kvfault.faults.regressions.legacy", "faker"):
        try:
            importlib.import_module(module)
        except ImportError:  # a worker imports it itself, and says what is missing
            pass


def _retire(w: _Worker) -> None:
    try:
        w.conn.send(None)
    except OSError:
        pass
    w.process.join(5)
    _stop(w)


def _stop(w: _Worker) -> None:
    if w.process.is_alive():
        w.process.terminate()
        w.process.join(2)
    if w.process.is_alive():
        w.process.kill()
        w.process.join(2)
    w.conn.close()
