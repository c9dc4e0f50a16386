"""Scheduler-side connector: lookups, load and save decisions, prefill chunking, bounds.

Per step (docs/design.md#the-step-loop): ``apply`` the completions the worker reported last step, then
``check_bounds``, then ``schedule``. ``after_forward`` books what the forward computed
and emits the step's saves.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import TypedDict

from kvfault.reference.errors import LoadNotTerminal
from kvfault.reference.interfaces import Clock, LookupClient, LookupQuery
from kvfault.reference.rules import Rules
from kvfault.reference.rules.anchors import grid_step
from kvfault.reference.rules.hits import LoadPlan
from kvfault.reference.rules.keys import block_hash_chain, chunk_keys, state_image_key
from kvfault.reference.stack.hbm import BlockPool, UncachedBlockPool
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import (
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

    @property
    def prefix_cache(self) -> bool:
        """HBM blocks are looked up by content: a dense model with caching on (this
        stack keeps no HBM prefix cache for hybrids)."""
        return self.prefix_caching and self.model_kind != "hybrid"


@dataclass
class SeqState:
    req: Request
    tier_ids: tuple[int, ...]
    chain: list[int]  # HBM prefix-cache chain, seeded with cache_seed (see ``add``)
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
    prompt_len: int = 0
    order: int = 0  # when it started running (the order steps visit running requests)
    # The first chunk key of ``tier_ids`` as the key events write it, once computed:
    # every key of a prefix of ``tier_ids`` is a key of ``tier_ids`` (a prefix chain).
    tier_first: str | None = None


def _first_key_hex(keys: list) -> str | None:
    if not keys:
        return None
    k = keys[0]
    return k.hex() if isinstance(k, bytes) else format(k & 0xFFFFFFFFFFFFFFFF, "016x")


class Holdings(TypedDict):
    """What the scheduler still holds (``Scheduler.holdings``)."""

    hbm_blocks: int
    loading: int
    unfinished: int


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        clock: Clock,
        lookup: LookupClient,
        pool: BlockPool | UncachedBlockPool,
        trace: Trace,
        rules: Rules | None = None,
        generation: int = 0,
        name: str = "engine",
    ):
        self.config = config
        self.name = name  # the engine's: HBM block numbers are per engine
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
        # Requests not yet arrived: a heap by (arrival time, submission order).
        self._arrivals: list[tuple[float, int, SeqState]] = []
        self._submitted = 0
        self._waiting: list[SeqState] = []
        # How many waiting requests need each block count: a step's admission scan
        # stops once no waiting request can fit, instead of visiting every one.
        self._waiting_needs: Counter[int] = Counter()
        # Running requests in the order they started, split by what a step does with
        # them: those still in prefill (a dict: removal is O(1)), and those decoding
        # (few; a list kept in start order). A step visits prefills only until its
        # budget is spent.
        self._prefilling: dict[str, SeqState] = {}
        self._decoding: list[SeqState] = []
        self._started = 0
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
        # Without an HBM prefix cache (hybrids, or caching off) the chain only names the
        # first block in the key event: the rest is never read.
        upto = None if self.config.prefix_cache else min(bs, req.prompt_len)
        seq = SeqState(
            req=req,
            tier_ids=self.rules.tier_ids(req, None),
            chain=block_hash_chain(req.prompt_token_ids, bs, req.cache_seed, upto),
            state_chain=block_hash_chain(req.prompt_token_ids, bs, self.rules.side_chain_seed(req)),
            n_blocks=-(-req.prompt_len // bs),
            prompt_len=req.prompt_len,
        )
        self._seqs[req.req_id] = seq
        self._unfinished += 1
        heapq.heappush(self._arrivals, (req.arrival_time, self._submitted, seq))
        self._submitted += 1

    def seq(self, req_id: str) -> SeqState:
        return self._seqs[req_id]

    def has_work(self) -> bool:
        return self._unfinished > 0

    @property
    def generation(self) -> int:
        """The last operation generation handed out."""
        return self._generation

    def holdings(self) -> Holdings:
        """What the scheduler still holds: HBM blocks, loads awaiting completion and
        unfinished requests."""
        return {
            "hbm_blocks": self.pool.num_held,
            "loading": len(self._loading),
            "unfinished": self._unfinished,
        }

    def next_arrival(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    def _key_event(self, site: str, seq: SeqState, keys: list) -> None:
        self._first_key_event(site, seq, _first_key_hex(keys))

    def _first_key_event(self, site: str, seq: SeqState, first: str | None) -> None:
        self.trace.record(
            Ev.KEY, req_id=seq.req.req_id, site=site, seed=seq.req.cache_seed, first=first
        )

    def _tier_key_event(self, site: str, seq: SeqState, end: int, ids: tuple[int, ...]) -> None:
        """The key event of ``ids[:end]``, the ids the lookup, load or save sends: its
        first chunk key is that of the first chunk of ``ids`` when ``ids[:end]`` holds a
        full chunk, else there is none."""
        cs = self.geometry.chunk_size  # the first key is that of the first chunk alone
        if ids is seq.tier_ids:
            if seq.tier_first is None:
                seq.tier_first = _first_key_hex(chunk_keys(ids[:cs], cs))
            first = seq.tier_first
        else:
            first = _first_key_hex(chunk_keys(ids[:cs], cs))
        self._first_key_event(site, seq, first if min(end, len(ids)) >= cs else None)

    # -- step 1a: completions --------------------------------------------------------
    def apply(self, completions: list[Completion]) -> None:
        now = self.clock.now()
        for c in completions:
            if c.op.kind is OpKind.SAVE:
                # ``_value_``: the member's text, without the enum's Python property.
                self.trace.record(Ev.SAVE_DONE, op=c.op, outcome=c.outcome._value_)
                continue
            seq = self._loading.get(c.op)
            if seq is None or not self.bounds.is_active(c.op):
                self.trace.record(Ev.COMPLETION_APPLIED, op=c.op, stale=True)
                continue
            finished = c.outcome is Outcome.FINISHED
            restarted = self.bounds.terminal(c.op, now, finished)
            del self._loading[c.op]
            self.trace.record(
                Ev.COMPLETION_APPLIED, op=c.op, outcome=c.outcome._value_, reason=c.reason
            )
            if restarted:
                restarted_ids = list(map(_op_text, restarted))
                self.trace.record(Ev.BOUND_RESTART, op=c.op, restarted=restarted_ids)
            load = seq.load
            assert load is not None
            if finished:
                self._commit_blocks(seq, load.start, load.kv_end)
                self._start_running(seq, load.claim)
            else:
                self._start_running(seq, seq.hbm_hit)

    def _commit_blocks(self, seq: SeqState, start: int, end: int) -> None:
        if not self.config.prefix_cache:
            return
        bs = self.geometry.block_size
        for b in range(start // bs, min(end, seq.prompt_len) // bs):
            self.pool.commit(seq.blocks[b], seq.chain[b])

    def _start_running(self, seq: SeqState, resume: int) -> None:
        seq.phase = Phase.RUNNING
        seq.computed = resume
        seq.saved_upto = self.geometry.floor_chunk(resume)
        if self.hybrid:
            seq.anchors = self.rules.anchors.plan(
                seq.prompt_len, resume, self.geometry, self.config.state_grid
            )
            for a in seq.anchors:
                self.trace.record(Ev.ANCHOR, req_id=seq.req.req_id, position=a)
        seq.order = self._started
        self._started += 1
        if seq.computed < seq.prompt_len:
            self._prefilling[seq.req.req_id] = seq
        else:
            self._decoding.append(seq)  # started last: its place is the end

    # -- step 1b: bounds -------------------------------------------------------------
    def check_bounds(self) -> None:
        overdue = self.bounds.overdue(self.clock.now())
        if overdue is not None:
            op, elapsed = overdue
            raise LoadNotTerminal(op, elapsed, self.bounds.bound_s)

    # -- step 1c: schedule -----------------------------------------------------------
    def schedule(self, step: int) -> StepMeta:
        now = self.clock.now()
        arrivals = self._arrivals
        if arrivals and arrivals[0][0] <= now:
            due = []
            while arrivals and arrivals[0][0] <= now:
                due.append(heapq.heappop(arrivals))
            due.sort(key=_submission_order)  # arrivals of one step in submission order
            arrived = [s for _, _, s in due]
            for s in arrived:
                self.trace.record(Ev.ARRIVE, req_id=s.req.req_id)
            self._waiting.extend(arrived)
            self._waiting_needs.update(s.n_blocks for s in arrived)
        meta = StepMeta(step=step)
        waiting = self._waiting
        kept: list[SeqState] = []  # visited and not admitted
        # The smallest need only grows as requests are admitted: this one never stops
        # the scan too early.
        smallest = min(self._waiting_needs, default=0)
        for i, seq in enumerate(waiting):
            if self.pool.num_free < smallest:
                # Admitting only takes blocks: nothing from here on can fit this step.
                # The rest stays where it is (a move, not a copy, of a long queue).
                waiting[:i] = kept
                break
            if self._admit(seq, meta):
                self._waiting_needs[seq.n_blocks] -= 1
                if not self._waiting_needs[seq.n_blocks]:
                    del self._waiting_needs[seq.n_blocks]
            else:
                kept.append(seq)
        else:
            self._waiting = kept
        self._plan_compute(meta)
        return meta

    def _admit(self, seq: SeqState, meta: StepMeta) -> bool:
        geo = self.geometry
        req = seq.req
        if not self.pool.can_allocate(seq.n_blocks):
            return False
        use_cache = self.config.prefix_cache
        # Only the blocks wholly before the prompt's last token may come from the cache:
        # that token is always computed (its logits give the first output token), and a
        # block the request computes into must be its own, never one another request
        # shares. So a prompt on the block grid whose every block is cached takes a
        # fresh last block and recomputes it (vLLM caps a prefix hit at the prompt
        # minus one token, and ATOM never matches a prompt's last block, alike).
        hittable = seq.chain[: (req.prompt_len - 1) // geo.block_size]
        seq.blocks, cached = self.pool.allocate(hittable, seq.n_blocks, use_cache)
        self.trace.record(
            Ev.BLOCKS, req_id=req.req_id, engine=self.name, took=seq.blocks, shared=cached
        )
        seq.hbm_hit = cached * geo.block_size
        self._key_event("hbm", seq, seq.chain)

        query = LookupQuery(seq.tier_ids, self._state_candidates(seq))
        result = self.lookup_client.lookup(query)
        self._tier_key_event("lookup", seq, len(query.tier_ids), query.tier_ids)
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
            tier_ids=seq.tier_ids,
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
        self._tier_key_event("load", seq, plan.kv_end, load.tier_ids)
        self.trace.record(Ev.DISPATCH, op=op, start=start, kv_end=plan.kv_end, claim=plan.claim)

    def _plan_compute(self, meta: StepMeta) -> None:
        """Prefill the running requests in start order within the step's budget; every
        request past its prefill decodes one token."""
        budget = self.geometry.prefill_budget
        hybrid = self.hybrid
        compute = meta.compute
        for seq in self._prefilling.values():
            if budget <= 0:
                break  # a step always computes something: the budget only falls
            end = min(seq.prompt_len, seq.computed + budget)
            if hybrid:
                end = self.rules.anchors.cut(seq.computed, end, seq.anchors)
            compute.append((seq.req.req_id, seq.computed, end))
            budget -= end - seq.computed
        meta.decode.extend([seq.req.req_id for seq in self._decoding])

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
                save = SaveOp(
                    op=op,
                    tier_ids=seq.tier_ids,
                    start=save_start,
                    end=new_end,
                    blocks=tuple(seq.blocks[save_start // bs : new_end // bs]),
                    states=states,
                )
                meta.saves.append(save)
                self._tier_key_event("save", seq, new_end, save.tier_ids)
                for pos, _ in states:
                    self.trace.record(
                        Ev.STATE_SAVE, op=op, position=pos, grid=self.config.state_grid
                    )
                seq.saved_upto = max(seq.saved_upto, new_end)
            if end == seq.prompt_len:
                completed.append(req_id)
                del self._prefilling[req_id]
                bisect.insort(self._decoding, seq, key=_start_order)
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
        self._decoding.remove(seq)
        # Recorded before the pool is told, so the trace shows a bad free even when the
        # pool raises.
        self.trace.record(Ev.BLOCKS, req_id=seq.req.req_id, engine=self.name, freed=seq.blocks)
        self.pool.free(seq.blocks)


# ``str(op)`` without a Python call per operation (a finish can restart hundreds).
_op_text = operator.attrgetter("_str")


def _submission_order(entry: tuple[float, int, SeqState]) -> int:
    return entry[1]


def _start_order(seq: SeqState) -> int:
    return seq.order
