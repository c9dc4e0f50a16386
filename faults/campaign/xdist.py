"""The pytest-xdist backend of the campaign session (``kvfault run -n N``, ``--tx``).

The session's cases go out as work items of ``kvfault.faults.fanout`` (local workers with
``workers``, other hosts with execnet gateway specs in ``tx``): one item per case, or
one per seed under a budget (the fan-out's deadline is the budget: workers start no
seed after it, but the session's ``always_runs`` seed always runs). A worker runs each case exactly as the
in-process campaign does (``cases_task``); the outcomes come back as JSON over xdist's
channel and the session puts them in campaign order, so the table, the summary and
the exit status are those of a run in one process. A worker notes each case as it
starts (``fanout.note``), so a worker that dies follows the forked pool's rule
(``dead_worker.DeadWorker``): its running case is blamed, the rest of its item runs
again.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Sequence

from kvfault.faults.campaign.artifacts import CampaignArtifacts
from kvfault.faults.campaign.dead_worker import DeadWorker
from kvfault.faults.campaign.hang_guard import TIMEOUT_EXIT
from kvfault.faults.campaign.reading import outcome_from_json, target_from_json
from kvfault.faults.campaign.session import InProcess, Session, run_session
from kvfault.faults.campaign.targets import Case
from kvfault.faults.campaign.tiers import Opened
from kvfault.faults.fanout import ItemResult, WorkItem, fan_out, note


def cases_task(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A work item on a fan-out worker: every target of the item on each of its seeds,
    through the campaign's own loop in this process (``run_session``, so judged, hang
    guarded and staged as in-process); the outcomes as JSON. It notes each case as it
    starts (its id) and a case that ran past the timeout (``HUNG``) before the hang
    guard ends this process, so a dead worker's cases follow the shared rule. Only on
    the host that started the campaign are the replay artifacts staged, kept or
    dropped here."""
    targets = [target_from_json(t) for t in payload["targets"]]
    here = payload.get("host") == socket.gethostname()
    where = payload.get("artifacts")
    store = CampaignArtifacts(Path(where)) if here and where else None
    first = targets[0]  # an item's targets share one tier and its options
    with Opened() as opened:
        result = run_session(
            targets, payload["seeds"], InProcess(opened.executor(first.tier, first.options)),
            artifacts=store, timeout_s=payload.get("timeout_s"), digests=payload.get("digests", True),
            progress=_note_start, on_hang=lambda _cut_short: note(HUNG),
        )  # fmt: skip
    return [o.as_json() for t in result.targets for o in t.cases]


# A worker's note that its running case passed --timeout: its hang guard ends it next.
HUNG = {"hung": True}


def _note_start(_done: int, _total: int, label: str) -> None:
    """A worker's session's progress: each case's id as it starts, as a note."""
    if label != "done":
        note(label)


# Seeds in the first wave of a budgeted campaign (then 2x, 4x, ...).
FIRST_WAVE = 64


def item_id(cases: Sequence[Case]) -> str:
    """The work item of ``cases`` (one seed's): the case's own target, or ``seed``."""
    return f"{cases[0].target.id if len(cases) == 1 else 'seed'}@{cases[0].seed}"


class Xdist:
    """The session's cases over pytest-xdist workers (``workers``: a count or
    ``auto``) or execnet gateways (``tx``; ``rsyncdirs`` sent to them first). Without
    a budget one work item per case, with one one per seed. A worker that died
    (a hang guard's exit, a crash) or an item whose task failed goes to the shared
    rule (``DeadWorker``: its running case is blamed); what that sends back goes out
    again as items of their own. Raises ``kvfault.faults.fanout.FanoutError`` when the
    workers could not start."""

    def __init__(
        self, workers: str | None = None, tx: Sequence[str] = (), rsyncdirs: Sequence[str] = ()
    ):
        self.workers, self.tx, self.rsyncdirs = workers, list(tx), list(rsyncdirs)

    def run(self, session: Session) -> None:
        targets, seeds = session.targets, session.seeds
        if session.budget_s is None:
            self._wave(session, [[Case(t, s)] for t in targets for s in seeds], None)
            return
        work = [[Case(t, s) for t in targets] for s in seeds]
        # In a budget, seeds go out in waves that double: a worker skips an item once
        # the budget is spent, but collecting and skipping 100,000 items is itself
        # minutes; no wave starts once the budget is spent.
        # The session's always_runs seed runs whatever the budget; no other starts past it.
        end = time.monotonic() + session.budget_s
        size = FIRST_WAVE
        always = session.always_runs
        while work and (always is not None or time.monotonic() < end):
            part, work = work[:size], work[size:]
            self._wave(session, part, max(0.0, end - time.monotonic()), always)
            size, always = size * 2, None

    def _wave(
        self,
        session: Session,
        units: list[list[Case]],
        deadline_s: float | None,
        always: int | None = None,
    ) -> None:
        """``units`` (each one seed's cases, one work item each) until none comes back
        from a dead worker; what comes back is of seeds that started: it runs whole."""
        while units:
            units = self._fan_out(session, units, deadline_s, always)
            deadline_s = always = None

    def _fan_out(
        self,
        session: Session,
        units: list[list[Case]],
        deadline_s: float | None,
        always: int | None,
    ) -> list[list[Case]]:
        """One fan-out of ``units``; returns what dead workers' cases send back."""
        store = session.artifacts
        common = {
            "artifacts": str(Path(store.directory).resolve()) if store is not None else None,
            "host": socket.gethostname(),
            "timeout_s": session.timeout_s,
            "digests": session.digests,
        }
        held = {item_id(u): u for u in units}
        items = [
            WorkItem(
                i,
                {
                    **common,
                    "targets": [c.target.as_json() for c in u],
                    "seeds": [u[0].seed],
                },
            )
            for i, u in held.items()
        ]
        running: dict[str, Case] = {}
        hung: set[str] = set()
        again: list[list[Case]] = []

        def noted(item: str, value: Any) -> None:
            if value == HUNG:
                hung.add(item)
            else:  # a case's id: it starts
                case = next((c for c in held[item] if c.id == value), None)
                if case is not None:
                    running[item] = case

        def arrived(r: ItemResult) -> None:
            if r.skipped:
                return
            if r.value is not None:
                for o in (outcome_from_json(o) for o in r.value):
                    session.finished(o.case, o)
            else:
                why = (r.error or "").strip().splitlines()
                # Hung: its hang guard's exit status, the one a forked worker shows.
                code = TIMEOUT_EXIT if r.id in hung else None
                detail = why[-1] if why else "?"
                dead = DeadWorker(held[r.id], running.get(r.id), code, detail, r.error)
                rest = dead.settle(session)
                if rest:
                    again.append(rest)
            # What runs now is the workers' to know: name none (r.id has finished).
            session.show(len(session.done), session.total, "")

        workers = self.workers
        if workers is not None and workers.isdigit() and int(workers) > len(items):
            workers = str(len(items))  # a worker with nothing to do only costs its start-up
        first = next((u for u in units if u[0].seed == always), None)
        fan_out(
            f"{__name__}:cases_task",
            items,
            workers=None if self.tx else workers,
            tx=self.tx,
            rsyncdirs=self.rsyncdirs,
            deadline_s=deadline_s,
            always=item_id(first) if first is not None else None,
            on_result=arrived,
            on_note=noted,
        )
        return again
