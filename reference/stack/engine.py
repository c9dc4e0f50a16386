"""The engine step loop (docs/design.md#the-step-loop) and the assembly of one engine from collaborators.

One step: the scheduler applies last step's completions, checks load bounds and
schedules; the worker enqueues the step's retrieves; the forward runs; the worker
submits the step's stores and polls (only here, between forwards). A worker with
pending work and no forward to run polls on an idle tick.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol

from kvfault.reference.errors import EngineStopped
from kvfault.reference.interfaces import (
    Clock,
    CompletionChannel,
    CopyEngine,
    ForwardTimer,
    KvPages,
    LookupClient,
    Tier,
)
from kvfault.reference.rules import Rules
from kvfault.reference.stack.completion_channel import QueueChannel
from kvfault.reference.stack.hbm import BlockPool, UncachedBlockPool
from kvfault.reference.stack.scheduler import Scheduler, SchedulerConfig
from kvfault.reference.stack.worker import RestoreWorker
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Geometry, ModelKind, Request, StateGrid, StepMeta


class ModelRunner(Protocol):
    """What the engine needs of a model (``kvfault.fakes.model.DeterministicModel`` is one)."""

    def compute(
        self, kv: KvPages, req: Request, blocks: list[int], start: int, end: int
    ) -> None: ...

    def output(self, kv: KvPages, req: Request, blocks: list[int]) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class EngineConfig:
    geometry: Geometry = field(default_factory=Geometry)
    model_kind: ModelKind = "dense"
    state_grid: StateGrid = "block"
    num_blocks: int = 16384
    transfer_deadline_s: float = 30.0
    bound_slack_s: float = 10.0
    restore_slots: int = 2
    idle_tick_s: float = 0.01
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.idle_tick_s <= 0:
            raise ValueError(f"idle_tick_s must be positive, got {self.idle_tick_s}")
        if self.bound_slack_s < 0:
            raise ValueError(f"bound_slack_s must be >= 0, got {self.bound_slack_s}")

    @property
    def bound_s(self) -> float:
        return self.transfer_deadline_s + self.bound_slack_s


@dataclass
class Collaborators:
    """What an engine is built from; a fault injector replaces one of these."""

    clock: Clock
    model: ModelRunner
    timer: ForwardTimer
    tier: Tier
    kv_factory: Callable[[int], KvPages]
    copy_factory: Callable[[KvPages], CopyEngine]
    # Called with the engine's trace, so the channel can record deliveries.
    channel_factory: Callable[[Trace], CompletionChannel] = QueueChannel
    lookup: LookupClient | None = None  # defaults to the tier itself


@dataclass
class EngineOutcome:
    """How one engine's run ended (``Engine.run``): its stop, if any, virtual and wall
    seconds, steps, the outputs it produced, and whether it hung. A scenario's run
    (``kvfault.faults.runs.RunResult``) holds one per engine it ran."""

    stopped: EngineStopped | None
    sim_seconds: float
    steps: int
    outputs: dict[str, tuple[int, ...]]
    hung: bool = False
    wall_seconds: float = 0.0


class Engine:
    """One server: scheduler, worker, HBM, sharing a trace. ``restart`` drops HBM and
    every tracker while the tier keeps its data."""

    def __init__(
        self,
        config: EngineConfig,
        parts: Collaborators,
        trace: Trace,
        rules: Rules | None = None,
        name: str = "engine",
    ):
        self.config = config
        self.parts = parts
        # The step of every event it records, read without a Python frame.
        self.trace = trace.child(partial(getattr, self, "steps"))
        self.rules = rules or Rules()
        self.name = name
        self.outputs: dict[str, tuple[int, ...]] = {}
        self.steps = 0
        self._forwards = 0
        self._build(0)

    def _build(self, generation: int) -> None:
        cfg, p = self.config, self.parts
        self.kv = p.kv_factory(cfg.num_blocks)
        self.channel = p.channel_factory(self.trace)
        sched = SchedulerConfig(
            cfg.geometry, cfg.model_kind, cfg.state_grid, cfg.bound_s, cfg.prefix_caching
        )
        self.scheduler = Scheduler(
            sched,
            p.clock,
            p.lookup or p.tier,
            # Without a prefix cache no block's content is looked up again.
            (BlockPool if sched.prefix_cache else UncachedBlockPool)(cfg.num_blocks),
            self.trace,
            self.rules,
            generation,
            self.name,
        )
        self.worker = RestoreWorker(
            p.clock,
            p.tier,
            p.copy_factory(self.kv),
            self.kv,
            self.channel,
            self.trace,
            self.rules.deadline(cfg.transfer_deadline_s),
            cfg.restore_slots,
        )
        self._forwards = 0

    def restart(self) -> None:
        self.trace.record(Ev.RESTART, engine=self.name)
        self._build(self.scheduler.generation)

    def add_request(self, req: Request) -> None:
        self.scheduler.add(req)

    def busy(self) -> bool:
        return self.scheduler.has_work() or self.worker.has_pending()

    def step(self) -> None:
        """One engine step; raises ``EngineStopped`` when the engine stops itself."""
        clock, sched, worker = self.parts.clock, self.scheduler, self.worker
        self.steps += 1
        sched.apply(self.channel.take())
        sched.check_bounds()
        meta = sched.schedule(self.steps)
        worker.start_load(meta.loads)
        if meta.compute or meta.decode:
            self._forward(meta)
        else:
            tick = self.config.idle_tick_s
            if not worker.has_pending():
                # Nothing to poll for: sleep to the next arrival or bound expiry.
                wake = [
                    t for t in (sched.next_arrival(), sched.bounds.next_expiry()) if t is not None
                ]
                if wake:
                    tick = max(tick, min(wake) - clock.now())
            clock.sleep(tick)
        completed = sched.after_forward(meta)
        for req_id in completed:
            seq = sched.seq(req_id)
            out = self.parts.model.output(self.kv, seq.req, seq.blocks)
            self.outputs[req_id] = out
            self.trace.record(Ev.OUTPUT, req_id=req_id, tokens=list(out))
            sched.prefill_done(req_id)
        worker.start_save(meta.saves)
        worker.get_finished()

    def _forward(self, meta: StepMeta) -> None:
        num_tokens = sum(e - s for _, s, e in meta.compute) + len(meta.decode)
        duration = self.parts.timer.duration(self._forwards, num_tokens)
        self.trace.record(
            Ev.FORWARD_START, index=self._forwards, tokens=num_tokens, duration=duration
        )
        for req_id, start, end in meta.compute:
            seq = self.scheduler.seq(req_id)
            self.parts.model.compute(self.kv, seq.req, seq.blocks, start, end)
        self.parts.clock.sleep(duration)
        self._forwards += 1
        self.trace.record(Ev.FORWARD_END, index=self._forwards - 1)

    def run(self, max_sim_seconds: float = 3600.0, max_steps: int = 1_000_000) -> EngineOutcome:
        """Step until nothing is left, the engine stops, or a limit is hit (``hung``)."""
        clock = self.parts.clock
        deadline = clock.now() + max_sim_seconds
        start_steps = self.steps
        start = clock.now()
        wall_start = time.perf_counter()
        stopped: EngineStopped | None = None
        hung = False
        try:
            while self.busy():
                if clock.now() > deadline or self.steps - start_steps >= max_steps:
                    hung = True
                    break
                self.step()
        except EngineStopped as exc:
            stopped = exc
            self.trace.record(
                Ev.STOP, op=exc.op, error=type(exc).__name__, elapsed=exc.elapsed, message=str(exc)
            )
        if stopped is None and not hung:
            # The last poll may have reported stores answered in the final step: apply
            # them before resting, so no completion is left unapplied in the inbox.
            self.scheduler.apply(self.channel.take())
            self.trace.record(
                Ev.QUIESCENT,
                engine=self.name,
                **self.scheduler.holdings(),
                **self.worker.pending(),
            )
        return EngineOutcome(
            stopped,
            clock.now() - start,
            self.steps - start_steps,
            dict(self.outputs),
            hung,
            time.perf_counter() - wall_start,
        )
