"""Scheduler-side connector: lookups, load and save decisions, prefill chunking, bounds.

Per step (docs/design.md#the-step-loop): ``apply`` the completions the worker reported last step, then
``check_bounds``, then ``schedule``. ``after_forward`` books what the forward computed
and emits the step's saves.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from reference.errors import LoadNotTerminal
from reference.interfaces import Clock, LookupClient, LookupQuery
from reference.rules import Rules
from reference.rules.anchors import grid_step
from reference.rules.hits import LoadPlan
from reference.rules.keys import block_hash_chain, chunk_keys, state_image_key
from reference.stack.hbm import BlockPool
from reference.trace import Ev, Trace
from reference.types import (
    Completion,
    Geometry,
    LoadOp,
    ModelKind,
    OperationId,
    OpKind,
    Outcome,
    Request,
    SaveOp,
    StateGrid,
    StepMeta,
)


class Phase(str, enum.Enum):
    WAITING = "waiting"
    LOADING = "loading"
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True)
class SchedulerConfig:
    geometry: Geometry
    model_kind: ModelKind = "dense"
    state_grid: StateGrid = "block"
    bound_s: float = 40.0
    prefix_caching: bool = True


@dataclass
class SeqState:
    req: Request
    tier_ids: tuple[int, ...]
    chain: list[int]  # HBM prefix-cache chain, seeded with cache_seed
    state_chain: list[int]  # side chain naming state images
    phase: Phase = Phase.WAITING
    blocks: list[int] = field(default_factory=list)
    hbm_hit: int = 0
    computed: int = 0
    saved_upto: int = 0
    anchors: list[int] = field(default_factory=list)
    load: LoadOp | None = None
    decode_left: int = 0
    n_blocks: int = 0  # HBM blocks the whole prompt needs


def _first_key_hex(keys: list) -> str | None:
    if not keys:
        return None
    k = keys[0]
    return k.hex() if isinstance(k, bytes) else format(k & 0xFFFFFFFFFFFFFFFF, "016x")


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        lookup: LookupClient,
        pool: BlockPool,
        trace: Trace,
        rules: Rules | None = None,
        generation: int = 0,
    ):
        self.config = config
        self.geometry = config.geometry
        self.clock = clock
        self.lookup_client = lookup
        self.pool = pool
        self.trace = trace
        self.rules = rules or Rules()
        self.bounds = self.rules.bounds(config.bound_s)
        # Operation ids count on from ``generation``: an engine restart hands over the
        # last one, so an id never recurs where an old completion could still meet it.
        self._generation = generation
        self._seqs: dict[str, SeqState] = {}
        self._arrivals: list[SeqState] = []
        self._waiting: list[SeqState] = []
        # How many waiting requests need each block count: a step's admission scan
        # stops once no waiting request can fit, instead of visiting every one.
        self._waiting_needs: Counter[int] = Counter()
        # Running requests in the order they started (a dict: removal is O(1)).
        self._running: dict[str, SeqState] = {}
        self._loading: dict[OperationId, SeqState] = {}
        self._unfinished = 0

    @property
    def hybrid(self) -> bool:
        return self.config.model_kind == "hybrid"

    # -- requests ------------------------------------------------------------------
    def add(self, req: Request) -> None:
        if req.req_id in self._seqs:
            raise ValueError(f"duplicate request id {req.req_id!r}")
        bs = self.geometry.block_size
        seq = SeqState(
            req=req,
            tier_ids=self.rules.tier_ids(req, None),
            chain=block_hash_chain(req.prompt_token_ids, bs, req.cache_seed),
            state_chain=block_hash_chain(req.prompt_token_ids, bs, self.rules.side_chain_seed(req)),
            n_blocks=-(-req.prompt_len // bs),
        )
        self._seqs[req.req_id] = seq
        self._unfinished += 1
        self._arrivals.append(seq)

    def seq(self, req_id: str) -> SeqState:
        return self._seqs[req_id]

    def has_work(self) -> bool:
        return self._unfinished > 0

    @property
    def generation(self) -> int:
        """The last operation generation handed out."""
        return self._generation

    def holdings(self) -> dict[str, int]:
        """What the scheduler still holds: HBM blocks, loads awaiting completion and
        unfinished requests."""
        return {
            "hbm_blocks": self.pool.num_held,
            "loading": len(self._loading),
            "unfinished": self._unfinished,
        }

    def next_arrival(self) -> float | None:
        return min((s.req.arrival_time for s in self._arrivals), default=None)

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    def _key_event(self, site: str, seq: SeqState, keys: list) -> None:
        self.trace.record(
            Ev.KEY,
            req_id=seq.req.req_id,
            site=site,
            seed=seq.req.cache_seed,
            first=_first_key_hex(keys),
        )

    # -- step 1a: completions --------------------------------------------------------
    def apply(self, completions: list[Completion]) -> None:
        now = self.clock.now()
        for c in completions:
            if c.op.kind is OpKind.SAVE:
                self.trace.record(Ev.SAVE_DONE, op=c.op, outcome=c.outcome.value)
                continue
            seq = self._loading.get(c.op)
            if seq is None or not self.bounds.is_active(c.op):
                self.trace.record(Ev.COMPLETION_APPLIED, op=c.op, stale=True)
                continue
            finished = c.outcome is Outcome.FINISHED
            restarted = self.bounds.terminal(c.op, now, finished)
            del self._loading[c.op]
            self.trace.record(
                Ev.COMPLETION_APPLIED, op=c.op, outcome=c.outcome.value, reason=c.reason
            )
            if restarted:
                self.trace.record(Ev.BOUND_RESTART, op=c.op, restarted=[str(o) for o in restarted])
            load = seq.load
            assert load is not None
            if finished:
                self._commit_blocks(seq, load.start, load.kv_end)
                self._start_running(seq, load.claim)
            else:
                self._start_running(seq, seq.hbm_hit)

    def _commit_blocks(self, seq: SeqState, start: int, end: int) -> None:
        if not self.config.prefix_caching or self.hybrid:
            return
        bs = self.geometry.block_size
        for b in range(start // bs, min(end, seq.req.prompt_len) // bs):
            self.pool.commit(seq.blocks[b], seq.chain[b])

    def _start_running(self, seq: SeqState, resume: int) -> None:
        seq.phase = Phase.RUNNING
        seq.computed = resume
        seq.saved_upto = self.geometry.floor_chunk(resume)
        if self.hybrid:
            seq.anchors = self.rules.anchors.plan(
                seq.req.prompt_len, resume, self.geometry, self.config.state_grid
            )
            for a in seq.anchors:
                self.trace.record(Ev.ANCHOR, req_id=seq.req.req_id, position=a)
        self._running[seq.req.req_id] = seq

    # -- step 1b: bounds -------------------------------------------------------------
    def check_bounds(self) -> None:
        overdue = self.bounds.overdue(self.clock.now())
        if overdue is not None:
            op, elapsed = overdue
            raise LoadNotTerminal(op, elapsed, self.bounds.bound_s)

    # -- step 1c: schedule -----------------------------------------------------------
    def schedule(self, step: int) -> StepMeta:
        now = self.clock.now()
        arrived = [s for s in self._arrivals if s.req.arrival_time <= now]
        if arrived:
            self._arrivals = [s for s in self._arrivals if s.req.arrival_time > now]
            for s in arrived:
                self.trace.record(Ev.ARRIVE, req_id=s.req.req_id)
            self._waiting.extend(arrived)
            self._waiting_needs.update(s.n_blocks for s in arrived)
        meta = StepMeta(step=step)
        still_waiting = []
        # The smallest need only grows as requests are admitted: this one never stops
        # the scan too early.
        smallest = min(self._waiting_needs, default=0)
        for i, seq in enumerate(self._waiting):
            if self.pool.num_free < smallest:
                # Admitting only takes blocks: nothing from here on can fit this step.
                still_waiting.extend(self._waiting[i:])
                break
            if self._admit(seq, meta):
                self._waiting_needs[seq.n_blocks] -= 1
                if not self._waiting_needs[seq.n_blocks]:
                    del self._waiting_needs[seq.n_blocks]
            else:
                still_waiting.append(seq)
        self._waiting = still_waiting
        self._plan_compute(meta)
        return meta

    def _admit(self, seq: SeqState, meta: StepMeta) -> bool:
        geo = self.geometry
        req = seq.req
        if not self.pool.can_allocate(seq.n_blocks):
            return False
        use_cache = self.config.prefix_caching and not self.hybrid
        seq.blocks, cached = self.pool.allocate(seq.chain, seq.n_blocks, use_cache)
        seq.hbm_hit = min(cached * geo.block_size, geo.floor_block(req.prompt_len - 1))
        self._key_event("hbm", seq, seq.chain)

        query = LookupQuery(seq.tier_ids, self._state_candidates(seq))
        result = self.lookup_client.lookup(query)
        self._key_event("lookup", seq, chunk_keys(seq.tier_ids, geo.chunk_size))
        if self.hybrid:
            self._key_event("state", seq, seq.state_chain)
            plan = self.rules.hits.hybrid(
                result.kv_hit, req.prompt_len, result.state_positions, geo
            )
        else:
            plan = self.rules.hits.dense(result.kv_hit, req.prompt_len, geo)
        self.trace.record(
            Ev.LOOKUP,
            req_id=req.req_id,
            prompt_len=req.prompt_len,
            kv_hit=result.kv_hit,
            states=list(result.state_positions),
            hbm_hit=seq.hbm_hit,
            claim=plan.claim,
            kv_end=plan.kv_end,
            hybrid=self.hybrid,
        )
        if plan.claim > seq.hbm_hit:
            self._dispatch_load(seq, plan, meta)
        else:
            self._start_running(seq, seq.hbm_hit)
        return True

    def _state_candidates(self, seq: SeqState) -> tuple[tuple[int, int], ...]:
        if not self.hybrid:
            return ()
        bs = self.geometry.block_size
        grid = grid_step(self.geometry, self.config.state_grid)
        return tuple(
            (p, state_image_key(seq.state_chain, p, bs))
            for p in range(grid, seq.req.prompt_len, grid)
        )

    def _dispatch_load(self, seq: SeqState, plan: LoadPlan, meta: StepMeta) -> None:
        geo = self.geometry
        bs = geo.block_size
        op = OperationId(seq.req.req_id, self._next_generation(), OpKind.LOAD)
        start = geo.floor_chunk(seq.hbm_hit)
        load = LoadOp(
            op=op,
            tier_ids=seq.tier_ids[: plan.kv_end],
            kv_end=plan.kv_end,
            claim=plan.claim,
            blocks=tuple(seq.blocks[start // bs : plan.kv_end // bs]),
            state_key=(state_image_key(seq.state_chain, plan.claim, bs) if self.hybrid else None),
            start=start,
        )
        seq.phase = Phase.LOADING
        seq.load = load
        self._loading[op] = seq
        self.bounds.dispatched(op, self.clock.now())
        meta.loads.append(load)
        self._key_event("load", seq, chunk_keys(load.tier_ids, geo.chunk_size))
        self.trace.record(Ev.DISPATCH, op=op, start=start, kv_end=plan.kv_end, claim=plan.claim)

    def _plan_compute(self, meta: StepMeta) -> None:
        budget = self.geometry.prefill_budget
        for seq in self._running.values():
            if seq.computed < seq.req.prompt_len:
                if budget <= 0:
                    continue
                end = min(seq.req.prompt_len, seq.computed + budget)
                if self.hybrid:
                    end = self.rules.anchors.cut(seq.computed, end, seq.anchors)
                meta.compute.append((seq.req.req_id, seq.computed, end))
                budget -= end - seq.computed
            else:
                meta.decode.append(seq.req.req_id)

    # -- after the forward -----------------------------------------------------------
    def after_forward(self, meta: StepMeta) -> list[str]:
        """Book the computed tokens, add the step's saves to ``meta``; returns the
        requests whose prefill completed this step."""
        geo = self.geometry
        bs = geo.block_size
        completed = []
        for req_id, start, end in meta.compute:
            seq = self._seqs[req_id]
            seq.computed = end
            self._commit_blocks(seq, start, end)
            states: tuple[tuple[int, int], ...] = ()
            if self.hybrid and end in seq.anchors:
                states = ((end, state_image_key(seq.state_chain, end, bs)),)
            new_end = geo.floor_chunk(end)
            if new_end > seq.saved_upto or states:
                save_start = seq.saved_upto if new_end > seq.saved_upto else new_end
                op = OperationId(req_id, self._next_generation(), OpKind.SAVE)
                meta.saves.append(
                    SaveOp(
                        op=op,
                        tier_ids=seq.tier_ids[:new_end],
                        start=save_start,
                        end=new_end,
                        blocks=tuple(seq.blocks[save_start // bs : new_end // bs]),
                        states=states,
                    )
                )
                self._key_event("save", seq, chunk_keys(seq.tier_ids[:new_end], geo.chunk_size))
                for pos, _ in states:
                    self.trace.record(
                        Ev.STATE_SAVE, op=op, position=pos, grid=self.config.state_grid
                    )
                seq.saved_upto = max(seq.saved_upto, new_end)
            if end == seq.req.prompt_len:
                completed.append(req_id)
        for req_id in meta.decode:
            seq = self._seqs[req_id]
            seq.decode_left -= 1
            if seq.decode_left <= 0:
                self._finish(seq)
        return completed

    def prefill_done(self, req_id: str) -> None:
        seq = self._seqs[req_id]
        seq.decode_left = seq.req.max_output_tokens - 1
        if seq.decode_left <= 0:
            self._finish(seq)

    def _finish(self, seq: SeqState) -> None:
        seq.phase = Phase.DONE
        self._unfinished -= 1
        del self._running[seq.req.req_id]
        self.pool.free(seq.blocks)
