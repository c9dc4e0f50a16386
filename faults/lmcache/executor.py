"""The campaign's executor for the real LMCache tier: each run's tiers are clients of
one real lmcache server (an ``LMCacheSession``), in real time, with every duration a
scenario sets shrunk by a time scale. The case runner, judge and properties are the
campaign's own (``kvfault.faults.campaign``); only this executor differs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Callable

from kvfault.faults.lmcache.server import RealTierLock
from kvfault.faults.lmcache.session import (
    DEFAULT_TIME_SCALE,
    LMCacheSession,
    RealTierFactory,
    RunClock,
    paced_time_scale,
)
from kvfault.faults.runs import RunContext, RunResult
from kvfault.faults.scenarios import SCENARIOS
from kvfault.faults.tiers import Executor


class LMCacheExecutor(Executor):
    """Runs scenarios on ``session``'s server. Not deterministic: reply times, and so
    the steps at which things happen, differ between runs of one seed.

    ``time_scale``: a number fixes every run's; ``None`` (the default) paces each run
    to the machine: the session's check before the run times lookups on the server,
    and the share of a core a thread gets, and ``paced_time_scale`` makes every
    real-time bound of the run (the story's durations, the tier's lookup and setup
    bounds) longer in proportion when either is worse than when ``DEFAULT_TIME_SCALE``
    was chosen.

    Notes per run: the tier, the time scale, the lookup round trip and the core share
    measured before it,
    lookups that timed out, what the check replaced, and for a stop the lmcache request
    the stopped load waited on (``stuck_stage``)."""

    tier = "lmcache"
    deterministic = False

    def __init__(self, session: LMCacheSession, time_scale: float | None = None):
        if time_scale is not None and time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.session = session
        self.time_scale = time_scale

    def context(self, ctx: RunContext, time_scale: float = DEFAULT_TIME_SCALE) -> RunContext:
        """``ctx`` with this session's tiers, a real clock and ``time_scale``."""
        return replace(
            ctx,
            tier_factory=RealTierFactory(
                self.session, ctx.injectors, pace=time_scale / DEFAULT_TIME_SCALE
            ),
            clock_factory=RunClock,
            time_scale=time_scale,
        )

    def execute(self, scenario: str, ctx: RunContext) -> tuple[RunResult, dict[str, object]]:
        session = self.session
        retired, resets = len(session.retired), len(session.client_resets)
        session.check()  # before the run's clock starts: a replaced server takes seconds
        scale = self.time_scale
        if scale is None:
            scale = paced_time_scale(session.lookup_s or 0.0, session.cpu_share or 1.0)
        ctx = self.context(ctx, scale)
        factory = ctx.tier_factory
        assert isinstance(factory, RealTierFactory)
        factory.checked()
        try:
            run = SCENARIOS[scenario].run(ctx)
        finally:
            factory.close()  # also reports wire firings seen after the last poll
        notes: dict[str, object] = {
            "tier": "lmcache",
            "time_scale": scale,
            "lookup_s": session.lookup_s,
            "cpu_share": session.cpu_share,
            "lookup_timeouts": sum(t.inner.lookup_timeouts for t in factory.tiers),
        }
        # What the health check before this run found and replaced (LMCacheSession.check).
        if len(session.retired) > retired:
            notes["server_retired"] = session.retired[retired:]
        if len(session.client_resets) > resets:
            notes["client_reset"] = session.client_resets[resets:]
        stop = run.stop
        if stop is not None:
            for tier in factory.tiers:
                ticket = tier.tickets.get(str(stop.op))
                if ticket is not None and ticket.reply is None:
                    notes["stuck_stage"] = ticket.stage
        return run, notes

    def case_done(self) -> None:
        self.session.close_runs()


@contextlib.contextmanager
def lmcache_executor(
    time_scale: float | None = None, wait_note: Callable[[str], None] | None = None
) -> Iterator[LMCacheExecutor]:
    """An ``LMCacheExecutor`` on a fresh session: the server is started on entry (raises
    ``LMCacheNotInstalled`` in one line without lmcache) and stopped, with everything
    it left, on exit.

    One real-tier campaign runs at a time on a host (``RealTierLock``): entry waits for
    another one to finish, after one line through ``wait_note`` (default: stderr)."""
    with RealTierLock(wait_note), LMCacheSession() as session:
        yield LMCacheExecutor(session, time_scale)
