"""Worker-side restore engine (docs/design.md#restores-and-the-transfer-deadline).

``start_load`` only enqueues retrieves. ``get_finished`` is the only place the worker
polls, between forwards: it advances retrieves and restore copies, enqueues copies two
at a time in the order the loads arrived, applies the transfer deadline, and reports
terminal operations on the completion channel.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence, TypedDict

from kvfault.reference.errors import RestoreFenceError, TransferUnprovable
from kvfault.reference.interfaces import (
    Clock,
    CompletionChannel,
    CopyEngine,
    KvPages,
    Tier,
    TierReply,
)
from kvfault.reference.rules.deadline import LoadClock, RestoreDeadline
from kvfault.reference.rules.keys import ChunkKeyMemo
from kvfault.reference.trace import Ev, Trace
from kvfault.reference.types import Completion, LoadOp, OperationId, Outcome, SaveOp


def page_digest(pages: list) -> int | None:
    """A digest of simulated pages (ints) for the trace; None for tensors, whose
    hash is by identity."""
    # Pages of one run are all ints (simulation) or all tensors: the first tells.
    if not pages or isinstance(pages[0], int):
        return hash(tuple(pages))
    return None


class Pending(TypedDict):
    """What the worker still tracks (``RestoreWorker.pending``)."""

    loads: int
    saves: int
    tier_tickets: int


@dataclass
class _Load:
    load: LoadOp
    ticket: object
    clock: LoadClock
    reply: TierReply | None = None
    copy: object = None
    deadline_from: float | None = None  # the deadline rule's start for ``clock``


@dataclass
class _Save:
    save: SaveOp
    ticket: object
    submitted_at: float


@dataclass
class RestoreWorker:
    clock: Clock
    tier: Tier
    copy_engine: CopyEngine
    kv: KvPages
    channel: CompletionChannel
    trace: Trace
    deadline: RestoreDeadline = field(default_factory=RestoreDeadline)
    slots: int = 2
    _loads: dict[OperationId, _Load] = field(default_factory=dict, init=False)
    _saves: dict[OperationId, _Save] = field(default_factory=dict, init=False)
    # Indexes into ``_loads`` (each in its order), so a poll visits only what can
    # change: loads whose retrieve is unanswered, and loads whose copy is in flight.
    _unanswered: dict[OperationId, _Load] = field(default_factory=dict, init=False)
    _copying: dict[OperationId, _Load] = field(default_factory=dict, init=False)
    # (deadline start, n, op) of every load whose deadline runs: the earliest tells
    # whether any load is past it. An entry whose start is no longer the load's is
    # stale and dropped when met.
    _deadlines: list[tuple[float, int, OperationId]] = field(default_factory=list, init=False)
    _pushed: int = field(default=0, init=False)
    _keys: ChunkKeyMemo | None = field(default=None, init=False)  # keys of what is sent

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"restore slots must be >= 1, got {self.slots}")

    def has_pending(self) -> bool:
        return bool(self._loads or self._saves)

    def pending(self) -> Pending:
        """What the worker still tracks: loads and saves not reported terminal, and of
        those the tier tickets whose reply it has not seen."""
        return {
            "loads": len(self._loads),
            "saves": len(self._saves),
            "tier_tickets": len(self._unanswered) + len(self._saves),
        }

    # -- enqueue only ------------------------------------------------------------------
    def start_load(self, loads: list[LoadOp]) -> None:
        for load in loads:
            ticket = self.tier.submit_retrieve(
                load.op, load.tier_ids, load.start, load.kv_end, load.state_key
            )
            entry = _Load(load, ticket, LoadClock(self.clock.now()))
            self._loads[load.op] = entry
            self._unanswered[load.op] = entry
            self._clock_changed(entry)
            self.trace.record(Ev.RETRIEVE_SUBMIT, op=load.op, start=load.start, end=load.kv_end)
            self._sent("retrieve", load.op, load.tier_ids, load.kv_end)

    def _clock_changed(self, entry: _Load) -> None:
        """Ask the deadline rule again when the running deadline may have changed."""
        start = self.deadline.clock_start(entry.clock)
        entry.deadline_from = start
        if start is not None:
            heapq.heappush(self._deadlines, (start, self._pushed, entry.load.op))
            self._pushed += 1

    def start_save(self, saves: list[SaveOp]) -> None:
        """Submit stores of what HBM holds now (after the step's forward)."""
        for save in saves:
            pages = list(map(self.kv.read, save.blocks))
            state = self.kv.read_state(save.op.req_id)
            states = [(pos, key, state) for pos, key in save.states]
            ticket = self.tier.submit_store(
                save.op, save.tier_ids, save.start, save.end, pages, states
            )
            self._saves[save.op] = _Save(save, ticket, self.clock.now())
            self.trace.record(Ev.SAVE, op=save.op, start=save.start, end=save.end)
            if save.states:  # and where the tier keeps the images it is sent
                self._sent("store", save.op, save.tier_ids, save.end, self.tier.state_grid)
            else:
                self._sent("store", save.op, save.tier_ids, save.end)

    def _sent(self, what: str, op: OperationId, ids: Sequence[int], end: int, *grid: str) -> None:
        """Record the chunk keys of the ids just sent to the tier for ``[0, end)``: the
        first chunk's and the last full chunk's (a prefix chain: it names every id up to
        there), so a checker sees the keys an operation really used; with state images,
        the tier's state grid (the only positions it keeps)."""
        if self._keys is None:
            self._keys = ChunkKeyMemo(self.tier.chunk_size)
        try:
            keys = self._keys.keys(ids, end)
        except (OverflowError, TypeError):  # ids the tier cannot key: it never answers
            keys = []
        first, last = (keys[0].hex(), keys[-1].hex()) if keys else (None, None)
        extra = {"state_grid": grid[0]} if grid else {}
        self.trace.record(Ev.SENT, op=op, what=what, end=end, first=first, last=last, **extra)

    # -- the poll, between forwards ----------------------------------------------------
    def get_finished(self) -> list[Completion]:
        out: list[Completion] = []
        self._poll_retrieves(out)
        self._poll_copies(out)
        self._enqueue_copies()
        self._poll_saves(out)
        self.channel.put(out)
        for c in out:
            self.trace.record(Ev.FINISHED_REPORTED, op=c.op, outcome=c.outcome._value_)
        self._check_deadlines()
        return out

    def _poll_retrieves(self, out: list[Completion]) -> None:
        now = self.clock.now()
        poll = self.tier.poll
        for op, entry in list(self._unanswered.items()):
            reply = poll(entry.ticket)
            if reply is None:
                continue
            entry.reply = reply
            entry.clock.retrieved_at = now
            del self._unanswered[op]
            self.trace.record(Ev.RETRIEVE_TERMINAL, op=op, ok=reply.ok, error=reply.error)
            if not reply.ok:
                del self._loads[op]
                out.append(Completion(op, Outcome.FAILED, reply.error or "retrieve failed"))
            else:
                self._clock_changed(entry)

    def _in_flight(self) -> list[_Load]:
        return list(self._copying.values())

    def _poll_copies(self, out: list[Completion]) -> None:
        for entry in self._in_flight():
            if self.copy_engine.is_complete(entry.copy):
                op = entry.load.op
                del self._loads[op]
                del self._copying[op]
                self.trace.record(
                    Ev.COPY_COMPLETE,
                    op=op,
                    pages=len(entry.load.blocks),
                    digest=page_digest(entry.reply.pages) if entry.reply else None,
                )
                out.append(Completion(op, Outcome.FINISHED))

    def _enqueue_copies(self) -> None:
        free = self.slots - len(self._copying)
        for entry in self._loads.values():
            if free <= 0:
                return
            if entry.copy is not None:
                continue
            if entry.reply is None:
                return  # in order: nothing overtakes a load whose retrieve is pending
            load = entry.load
            assert entry.reply.ok
            try:
                entry.copy = self.copy_engine.enqueue(
                    load.op,
                    entry.reply.pages,
                    load.blocks,
                    entry.reply.state,
                    load.op.req_id,
                )
            except RestoreFenceError as exc:
                entry.clock.fence_failed = True
                self._clock_changed(entry)
                self.trace.record(Ev.COPY_FENCE_ERROR, op=load.op, error=str(exc))
                return
            entry.clock.enqueued_at = self.clock.now()
            self._copying[load.op] = entry
            self._clock_changed(entry)
            free -= 1
            self.trace.record(Ev.COPY_ENQUEUE, op=load.op, pages=len(load.blocks))

    def _poll_saves(self, out: list[Completion]) -> None:
        now = self.clock.now()
        for op, entry in list(self._saves.items()):
            reply = self.tier.poll(entry.ticket)
            if reply is not None:
                outcome = Outcome.FINISHED if reply.ok else Outcome.FAILED
                out.append(Completion(op, outcome, reply.error))
            elif now - entry.submitted_at > self.deadline.deadline_s:
                # A store is best effort: an unanswered one fails, it never stops the engine.
                out.append(Completion(op, Outcome.FAILED, "store not answered"))
            else:
                continue
            del self._saves[op]

    def _check_deadlines(self) -> None:
        now = self.clock.now()
        limit = self.deadline.deadline_s
        heap = self._deadlines
        while heap:
            start, _, op = heap[0]
            entry = self._loads.get(op)
            if entry is None or entry.deadline_from != start:
                heapq.heappop(heap)  # stale: the load is gone or its deadline moved
                continue
            if not now - start > limit:
                return  # the earliest running deadline has time left: so do the rest
            break
        else:
            return
        # Some load is past its deadline: name the first in load order, as a scan would.
        for op, entry in self._loads.items():
            began = self.deadline.clock_start(entry.clock)
            if began is not None and now - began > self.deadline.deadline_s:
                phase = "retrieve" if entry.clock.retrieved_at is None else "restore copy"
                raise TransferUnprovable(op, now - began, phase, self.deadline.deadline_s)
