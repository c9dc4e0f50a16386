"""The plumbing a simulated scenario runs on: one ``SimWorld``, the run's injectors bound
to its trace and wrapping its collaborators, one tier that outlives engine restarts,
and the bookkeeping of the requests sent and the outcomes seen, from which the run's
``RunResult`` is made."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from kvfault.fakes.sim import SimWorld
from kvfault.fakes.workloads import Workloads, resend
from kvfault.faults.argtypes import check_scale
from kvfault.faults.injectors.base import wrap_all
from kvfault.faults.runs import Injector, RunContext, RunResult
from kvfault.reference.interfaces import Tier
from kvfault.reference.stack.engine import Engine, EngineConfig, EngineOutcome
from kvfault.reference.trace import Ev
from kvfault.reference.types import Request


class _Run:
    """Shared plumbing: one world, injectors bound to its trace, request bookkeeping."""

    def __init__(
        self,
        name: str,
        ctx: RunContext,
        config: EngineConfig,
        own_injectors: Sequence[Injector] = (),
    ):
        if ctx.time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {ctx.time_scale}")
        check_scale(ctx.scale)
        self.name = name
        self.ctx = ctx
        self.config = replace(
            config,
            transfer_deadline_s=ctx.seconds(config.transfer_deadline_s),
            bound_slack_s=ctx.seconds(config.bound_slack_s),
        )
        self.world = SimWorld(ctx.clock_factory())
        # The scenario's own faults (part of its workload) come before the plan's.
        self.injectors = [*own_injectors, *ctx.injectors]
        self.wrap = wrap_all(self.injectors)
        for inj in self.injectors:
            inj.bind(self.world.trace)
        self._tier = None
        self.requests: dict[str, Request] = {}
        self.outcomes: list[EngineOutcome] = []
        self.notes: dict[str, object] = {}
        self.workloads = Workloads(ctx.seed)

    def new_tier(self) -> Tier:
        if self.ctx.tier_factory is not None:
            return self.ctx.tier_factory(self.world, self.config)
        return self.world.memory_tier(self.config)

    def engine(self, name: str = "engine", **kwargs: Any) -> Engine:
        if "tier" not in kwargs:
            # One tier per run: it outlives engine restarts.
            if self._tier is None:
                self._tier = self.wrap("tier", self.new_tier())
            kwargs["tier"] = self._tier
        return self.world.engine(
            self.config, rules=self.ctx.rules, name=name, wrap=self.wrap, **kwargs
        )

    def submit(self, engine: Engine, reqs: Sequence[Request]) -> list[Request]:
        out = []
        for r in reqs:
            r = self.ctx.request_map(r)
            self.requests[r.req_id] = r
            engine.add_request(r)
            out.append(r)
        return out

    def run(self, engine: Engine, **kwargs: Any) -> EngineOutcome:
        outcome = engine.run(**kwargs)
        self.outcomes.append(outcome)
        return outcome

    def stopped(self) -> bool:
        return any(o.stopped or o.hung for o in self.outcomes)

    def result(self, startup_error: str | None = None) -> RunResult:
        return RunResult(
            self.name,
            self.ctx.seed,
            self.world.trace,
            self.config,
            self.requests,
            self.outcomes,
            self.injectors,
            self.notes,
            startup_error,
            self.ctx.time_scale,
        )

    def hit_rate(self, reqs: Sequence[Request]) -> float:
        claims = {e.req_id: e.data["claim"] for e in self.world.trace.of(Ev.LOOKUP)}
        total = sum(r.prompt_len for r in reqs)
        return sum(claims.get(r.req_id, 0) for r in reqs) / total if total else 0.0


def _renamed(run: _Run, reqs: Sequence[Request], tag: str, at: float = 0.0) -> list[Request]:
    return [resend(r, f"{r.req_id}-{tag}", at) for r in reqs]
