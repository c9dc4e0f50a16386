"""The pytest-xdist backend of the campaign session (``kvfault run -n N``, ``--tx``).

The session's cases go out as work items of ``kvfault.faults.fanout`` (local workers with
``workers``, other hosts with execnet gateway specs in ``tx``): one item per case, or
one per seed under a budget (the fan-out's deadline is the budget: workers start no
seed after it, but the session's ``always_runs`` seed always runs). A worker runs each case exactly as the
in-process campaign does (``cases_task``); the outcomes come back as JSON over xdist's
channel and the session puts them in campaign order, so the table, the summary and
the exit status are those of a run in one process.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Sequence

from kvfault.faults.campaign.artifacts import CampaignArtifacts
from kvfault.faults.campaign.reading import outcome_from_json, target_from_json
from kvfault.faults.campaign.session import InProcess, Session, run_session
from kvfault.faults.campaign.targets import Case
from kvfault.faults.campaign.tiers import Opened
from kvfault.faults.fanout import ItemResult, WorkItem, fan_out


def cases_task(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A work item on a fan-out worker: every target of the item on each of its seeds,
    through the campaign's own loop in this process (``run_session``, so judged, hang
    guarded and staged as in-process); the outcomes as JSON. Only on the host that
    started the campaign are the replay artifacts staged, kept or dropped here."""
    targets = [target_from_json(t) for t in payload["targets"]]
    here = payload.get("host") == socket.gethostname()
    where = payload.get("artifacts")
    store = CampaignArtifacts(Path(where)) if here and where else None
    first = targets[0]  # an item's targets share one tier and its options
    with Opened() as opened:
        result = run_session(
            targets, payload["seeds"], InProcess(opened.executor(first.tier, first.options)),
            artifacts=store, timeout_s=payload.get("timeout_s"), digests=payload.get("digests", True),
        )  # fmt: skip
    return [o.as_json() for t in result.targets for o in t.cases]


# Seeds in the first wave of a budgeted campaign (then 2x, 4x, ...).
FIRST_WAVE = 64


class Xdist:
    """The session's cases over pytest-xdist workers (``workers``: a count or
    ``auto``) or execnet gateways (``tx``; ``rsyncdirs`` sent to them first). Without
    a budget one work item per case, with one one per seed. A case whose worker died
    (a hang guard's exit, a crash) goes to ``session.lost``. Raises
    ``kvfault.faults.fanout.FanoutError`` when the workers could not start."""

    def __init__(
        self, workers: str | None = None, tx: Sequence[str] = (), rsyncdirs: Sequence[str] = ()
    ):
        self.workers, self.tx, self.rsyncdirs = workers, list(tx), list(rsyncdirs)

    def run(self, session: Session) -> None:
        store = session.artifacts
        common = {
            "artifacts": str(Path(store.directory).resolve()) if store is not None else None,
            "host": socket.gethostname(),
            "timeout_s": session.timeout_s,
            "digests": session.digests,
        }
        targets, seeds = session.targets, session.seeds
        if session.budget_s is None:
            groups = [([t], [s]) for t in targets for s in seeds]
        else:
            groups = [(list(targets), [s]) for s in seeds]
        items = [
            WorkItem(
                f"{ts[0].id if len(ts) == 1 else 'seed'}@{ss[0]}",
                {**common, "targets": [t.as_json() for t in ts], "seeds": ss},
            )
            for ts, ss in groups
        ]
        by_id = dict(zip((i.id for i in items), groups, strict=True))

        def arrived(r: ItemResult) -> None:
            if r.skipped:
                return
            ts, ss = by_id[r.id]
            if r.value is not None:
                for o in (outcome_from_json(o) for o in r.value):
                    session.finished(o.case, o)
            else:
                why = (r.error or "").strip().splitlines()
                for s in ss:
                    for t in ts:
                        session.lost(Case(t, s), why[-1] if why else "?", error=r.error)
            # What runs now is the workers' to know: name none (r.id has finished).
            session.show(len(session.done), session.total, "")

        def wave(part: list[WorkItem], deadline_s: float | None, always: str | None = None) -> None:
            workers = self.workers
            if workers is not None and workers.isdigit() and int(workers) > len(part):
                workers = str(len(part))  # a worker with nothing to do only costs its start-up
            fan_out(
                f"{__name__}:cases_task",
                part,
                workers=None if self.tx else workers,
                tx=self.tx,
                rsyncdirs=self.rsyncdirs,
                deadline_s=deadline_s,
                always=always,
                on_result=arrived,
            )

        if session.budget_s is None:
            wave(items, None)
            return
        # In a budget, seeds go out in waves that double: a worker skips an item once
        # the budget is spent, but collecting and skipping 100,000 items is itself
        # minutes; no wave starts once the budget is spent.
        # The session's always_runs seed runs whatever the budget; no other starts past it.
        end = time.monotonic() + session.budget_s
        size = FIRST_WAVE
        always = next((i.id for i in items if by_id[i.id][1] == [session.always_runs]), None)
        while items and (always is not None or time.monotonic() < end):
            part, items = items[:size], items[size:]
            wave(part, max(0.0, end - time.monotonic()), always)
            size, always = size * 2, None
