"""The campaign beyond one plain loop: over pytest-xdist workers or hosts, and in a budget.

``run_spread`` runs a campaign's cases as work items of ``faults.fanout`` (local
workers with ``workers``, other hosts with execnet gateway specs in ``tx``), one item
per case, or one per seed under a budget; the outcomes come back over xdist's channel
and are put together in the same order as an in-process run, so the table, the
summary and the exit status are the same.

``run_within_budget`` is the in-process soak: seed after seed, every target on each,
until the budget is spent; the seed that is running when it runs out finishes.

Seeds are the unit of a budget: a seed is started whole (every target) or not at all,
so ``seeds_ran`` is the seeds every target ran.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from faults.campaign.outcomes import CampaignResult, CaseOutcome, in_campaign_order
from faults.campaign.runner import ERROR, AfterCase, BeforeCase, CaseRunner, run_target
from faults.campaign.targets import Case, Target

if TYPE_CHECKING:
    from faults.campaign.execute import Executor

# (cases done, cases in all, what just finished)
Progress = Callable[[int, int, str], None]


def seeds_ran(result: CampaignResult) -> list[int]:
    """The seeds the campaign ran, in order."""
    return sorted({c.case.seed for c in result.cases})


def run_within_budget(
    targets: Sequence[Target],
    seeds: Sequence[int],
    budget_s: float,
    before: BeforeCase | None = None,
    after: AfterCase | None = None,
    progress: Callable[[int, int, Case], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    executor: Executor | None = None,
    digests: bool = True,
) -> CampaignResult:
    """Run every target on ``seeds[0]``, then on ``seeds[1]``, ..., on ``executor``'s
    tier (default: in-process), starting no seed once ``budget_s`` seconds (by
    ``clock``) have passed; the first seed always runs. ``digests=False``: outcomes
    carry no trace digest."""
    t0, start = time.perf_counter(), clock()
    total = len(targets) * len(seeds)
    done: dict[tuple[str, int], CaseOutcome] = {}
    ran: list[int] = []
    count = 0

    def starting(case: Case) -> None:
        nonlocal count
        if progress:
            progress(count, total, case)
        count += 1

    for i, seed in enumerate(seeds):
        if i and clock() - start >= budget_s:
            break
        # Its cache of fixed runs is per seed: a soak stays small.
        runner = CaseRunner(executor=executor, digests=digests)
        for t in targets:
            for c in run_target(t, [seed], runner, before, after, starting).cases:
                done[(t.id, seed)] = c
        ran.append(seed)
    if progress and targets and ran:
        progress(count, count, Case(targets[-1], ran[-1]))
    return CampaignResult(in_campaign_order(targets, ran, done), time.perf_counter() - t0)


def cases_task(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A work item on a fan-out worker: every target of the item on each of its seeds,
    judged as in-process; the outcomes as JSON. On the host that started the campaign,
    each case's replay artifact is written before it runs and removed when it passed."""
    from faults.campaign.hang_guard import arm_hang_guard, disarm_hang_guard
    from faults.report.artifacts import drop_artifact, keep_artifact, stage_artifact

    targets = [Target.from_json(t) for t in payload["targets"]]
    here = payload.get("host") == socket.gethostname()
    artifacts = Path(payload["artifacts"]) if here and payload.get("artifacts") else None
    out = []
    for seed in payload["seeds"]:
        runner = CaseRunner()
        for t in targets:
            case = Case(t, seed)
            staged = stage_artifact(case, artifacts) if artifacts else None
            arm_hang_guard(payload.get("timeout_s"))
            outcome = runner.run(case)
            disarm_hang_guard()
            if staged is not None and outcome.ok:
                drop_artifact(*staged)  # an artifact `kvfault repro` wrote stays
            elif staged is not None:
                keep_artifact(case, artifacts)
            out.append(outcome.as_json())
    return out


def run_spread(
    targets: Sequence[Target],
    seeds: Sequence[int],
    *,
    workers: str | None = None,
    tx: Sequence[str] = (),
    rsyncdirs: Sequence[str] = (),
    budget_s: float | None = None,
    artifacts: Path | None = None,
    timeout_s: float | None = None,
    progress: Progress | None = None,
) -> CampaignResult:
    """The campaign over xdist workers (``workers``) or gateways (``tx``). Without a
    budget, one work item per case; with ``budget_s``, one per seed (every target),
    and workers start no seed after the budget is spent (each runs at least one).

    A case whose worker died (a hang guard's exit, a crash) is an ERROR outcome.
    Raises ``faults.fanout.FanoutError`` when the workers could not start."""
    from faults.fanout import ItemResult, WorkItem, fan_out

    t0 = time.perf_counter()
    common = {
        "artifacts": str(artifacts.resolve()) if artifacts is not None else None,
        "host": socket.gethostname(),
        "timeout_s": timeout_s,
    }
    if budget_s is None:
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
    total = len(targets) * len(seeds)
    done: dict[tuple[str, int], CaseOutcome] = {}

    def arrived(r: ItemResult, group: tuple[list[Target], list[int]]) -> None:
        if r.skipped:
            return
        if r.value is not None:
            outcomes = [CaseOutcome.from_json(o) for o in r.value]
        else:
            why = (r.error or "").strip().splitlines()
            outcomes = [
                CaseOutcome(
                    Case(t, s),
                    ERROR,
                    signature=f"the worker running it failed: {why[-1] if why else '?'}",
                    error=r.error,
                )
                for s in group[1]
                for t in group[0]
            ]
        for o in outcomes:
            done[(o.case.target.id, o.case.seed)] = o
        if progress:
            progress(len(done), total, r.id)

    by_id = dict(zip((i.id for i in items), groups, strict=True))
    if workers is not None and workers.isdigit() and int(workers) > len(items):
        workers = str(len(items))  # a worker with nothing to do only costs its start-up
    fan_out(
        f"{__name__}:cases_task",
        items,
        workers=None if tx else workers,
        tx=tx,
        rsyncdirs=rsyncdirs,
        deadline_s=budget_s,
        on_result=lambda r: arrived(r, by_id[r.id]),
    )
    ran = sorted({s for (_, s) in done})
    return CampaignResult(in_campaign_order(targets, ran, done), time.perf_counter() - t0)


def keep_artifacts(result: CampaignResult, directory: Path) -> dict[str, Path]:
    """The replay artifact of every case that did not pass, by case id. A worker on
    this host wrote it before the case ran; one from another host is written here."""
    from faults.report.artifacts import keep_artifact

    return {c.case.id: keep_artifact(c.case, directory) for c in result.cases if not c.ok}
