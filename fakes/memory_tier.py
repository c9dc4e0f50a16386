"""In-process tier with LMCache semantics, in virtual (or real) time.

- Keys: prefix-chain chunk keys over tier ids (``kvfault.reference.rules.keys.chunk_keys``); a partial
  chunk is not keyed, so it is neither stored nor hit.
- Lookup: the contiguous prefix of full chunks held and visible.
- Completion: asynchronous; a submitted retrieve or store answers ``latency_s`` later
  (plus bytes over bandwidth), observed only by ``poll``.
- State grid: state images kept at every block boundary (``"block"``, the in-process
  connector) or only on the chunk grid (``"chunk"``, the multiprocess server, which
  silently drops the rest).
- Capacity: at most ``capacity_chunks`` chunks, least recently used evicted first, at
  once. With ``refuse_when_full`` it behaves like lmcache's L1 instead: a store whose
  chunks do not fit keeps what fits and answers ``ok=False`` ("store not kept"), and a
  background evictor -- every ``evict_interval_s``, once usage reaches
  ``evict_watermark`` of the capacity -- drops the ``evict_ratio`` least recently used
  share of the chunks (lmcache's ``trigger_watermark`` 0.8, ``eviction_ratio`` 0.2,
  1 s loop). Evictions happen on the tier's clock, seen at its next call.
- Like the real server, a retrieve or store whose start is off the chunk grid or whose
  ids lie outside ``[0, 2**32)`` is never answered. A lookup with such ids raises
  ``OverflowError`` by default (the lookup channel turns that into a "malformed lookup
  frame" reply); with ``miss_on_bad_ids`` it is a miss, counted in
  ``unkeyable_lookups``, as on the real tier (the server never answers it and the
  tier reports a miss after its lookup timeout).
- A range with ``end <= start`` has nothing to transfer: with ``answer_empty_ranges``
  the tier answers it at once with ``ok=True`` and no pages, as the real tier does
  (it never sends it to the server); by default it is never answered.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

from kvfault.reference.interfaces import (
    Clock,
    LookupQuery,
    LookupResult,
    Page,
    State,
    TierReply,
)
from kvfault.reference.rules.keys import ChunkKeyMemo, chunk_keys
from kvfault.reference.types import Geometry, OperationId, StateGrid


@dataclass
class _Pending:
    op: OperationId
    ready_at: float
    reply: TierReply | None  # None: never answered
    on_ready: Callable[[], TierReply] | None = None  # run once when the reply is first seen


class MemoryTier:
    """The embedded tier. ``visibility_delay_s`` models a store acknowledged before it
    is visible to lookups (0 by default). The options after it make the tier behave
    like the real lmcache server where the defaults keep the older, simpler model
    (module docstring): ``refuse_when_full`` and its evictor settings,
    ``answer_empty_ranges`` and ``miss_on_bad_ids``."""

    def __init__(
        self,
        clock: Clock,
        geometry: Geometry,
        state_grid: StateGrid = "block",
        capacity_chunks: int | None = None,
        latency_s: float = 2e-3,
        bandwidth_bytes_s: float = 20e9,
        page_bytes: int = 64 * 1024,
        visibility_delay_s: float = 0.0,
        *,
        refuse_when_full: bool = False,
        evict_watermark: float = 0.8,
        evict_ratio: float = 0.2,
        evict_interval_s: float = 1.0,
        answer_empty_ranges: bool = False,
        miss_on_bad_ids: bool = False,
    ):
        if state_grid not in ("block", "chunk"):
            raise ValueError(f"state_grid must be 'block' or 'chunk', got {state_grid!r}")
        if capacity_chunks is not None and capacity_chunks <= 0:
            raise ValueError(f"capacity_chunks must be positive, got {capacity_chunks}")
        if refuse_when_full and capacity_chunks is None:
            raise ValueError("refuse_when_full needs capacity_chunks")
        if not 0.0 < evict_watermark <= 1.0:
            raise ValueError(f"evict_watermark must lie in (0, 1], got {evict_watermark}")
        if not 0.0 < evict_ratio <= 1.0:
            raise ValueError(f"evict_ratio must lie in (0, 1], got {evict_ratio}")
        if evict_interval_s <= 0:
            raise ValueError(f"evict_interval_s must be positive, got {evict_interval_s}")
        self.clock = clock
        self.block_size = geometry.block_size
        self.chunk_size = geometry.chunk_size
        self.state_grid: StateGrid = state_grid
        self.capacity_chunks = capacity_chunks
        self.latency_s = latency_s
        self.bandwidth_bytes_s = bandwidth_bytes_s
        self.page_bytes = page_bytes
        self.visibility_delay_s = visibility_delay_s
        self.refuse_when_full = refuse_when_full
        self.evict_watermark = evict_watermark
        self.evict_ratio = evict_ratio
        self.evict_interval_s = evict_interval_s
        self.answer_empty_ranges = answer_empty_ranges
        self.miss_on_bad_ids = miss_on_bad_ids
        self.unkeyable_lookups = 0  # lookups with ids outside [0, 2**32): misses
        self.refused_chunks = 0  # chunks a full tier did not keep
        self.evicted_chunks = 0  # chunks the background evictor dropped
        # The evictor's loop ticks every evict_interval_s from the tier's creation.
        self._next_evict = self.clock.now() + evict_interval_s
        # chunk key -> (visible_at, pages of the chunk)
        self._chunks: OrderedDict[bytes, tuple[float, tuple[Page, ...]]] = OrderedDict()
        self._states: dict[int, tuple[float, State]] = {}
        # The scheduler passes one tuple of a prompt's ids to every call: keyed once.
        self._keyed = ChunkKeyMemo(self.chunk_size)

    # -- lookup ------------------------------------------------------------------
    def lookup(self, query: LookupQuery) -> LookupResult:
        self._background_evict()
        now = self.clock.now()
        hit = 0
        try:
            keys = self._keyed.keys(query.tier_ids)
        except OverflowError:
            if not self.miss_on_bad_ids:
                raise
            # The real server never answers such a lookup; the scheduler sees a miss.
            self.unkeyable_lookups += 1
            keys = []
        for key in keys:
            entry = self._chunks.get(key)
            if entry is None or entry[0] > now:
                break
            self._chunks.move_to_end(key)
            hit += self.chunk_size
        states = tuple(
            pos
            for pos, key in query.state_candidates
            if key in self._states and self._states[key][0] <= now
        )
        return LookupResult(kv_hit=hit, state_positions=states)

    def on_state_grid(self, position: int) -> bool:
        grid = self.chunk_size if self.state_grid == "chunk" else self.block_size
        return position > 0 and position % grid == 0

    # -- asynchronous operations ---------------------------------------------------
    def _cost(self, num_pages: int) -> float:
        return self.latency_s + num_pages * self.page_bytes / self.bandwidth_bytes_s

    def _answerable(self, tier_ids: Sequence[int], start: int, end: int) -> bool:
        if start % self.chunk_size or start < 0 or end < start:
            return False
        return self._keyed.fit_u32(tier_ids, end)

    def submit_retrieve(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        state_key: int | None,
    ) -> _Pending:
        self._background_evict()
        if end <= start and self.answer_empty_ranges:
            return _Pending(op, self.clock.now(), TierReply(ok=True, pages=[], state=None))
        num_pages = max(0, (end - start) // self.block_size)
        ready = self.clock.now() + self._cost(num_pages)
        if not self._answerable(tier_ids, start, end):
            return _Pending(op, ready, None)
        pending = _Pending(op, ready, None)
        # The data is read when the reply is first seen, so an eviction between the
        # lookup and this point turns into a failed retrieve, as in LMCache.
        pending.on_ready = lambda: self._read(tier_ids, start, end, state_key)
        return pending

    def _read(
        self, tier_ids: Sequence[int], start: int, end: int, state_key: int | None
    ) -> TierReply:
        keys = self._keyed.keys(tier_ids, self.ceil_chunk(end))
        pages: list[Page] = []
        first, last = start // self.chunk_size, -(-end // self.chunk_size)
        if last > len(keys):
            return TierReply(ok=False, error=f"range [{start}, {end}) is not keyed")
        for key in keys[first:last]:
            entry = self._chunks.get(key)
            if entry is None:
                return TierReply(ok=False, error="chunk evicted before retrieve")
            self._chunks.move_to_end(key)
            pages.extend(entry[1])
        state = None
        if state_key is not None:
            if state_key not in self._states:
                return TierReply(ok=False, error="state image evicted before retrieve")
            state = self._states[state_key][1]
        skip = (start - first * self.chunk_size) // self.block_size
        want = (end - start) // self.block_size
        return TierReply(ok=True, pages=pages[skip : skip + want], state=state)

    def ceil_chunk(self, tokens: int) -> int:
        return -(-tokens // self.chunk_size) * self.chunk_size

    def submit_store(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: Sequence[Page],
        states: Sequence[tuple[int, int, State]],
    ) -> _Pending:
        self._background_evict()
        if end <= start and self.answer_empty_ranges:
            # No KV to write; the real tier still keeps the on-grid state images.
            return _Pending(op, self.clock.now(), self._write(tier_ids, start, end, [], states))
        ready = self.clock.now() + self._cost(len(pages))
        if not self._answerable(tier_ids, start, end):
            return _Pending(op, ready, None)
        pending = _Pending(op, ready, None)
        pending.on_ready = lambda: self._write(tier_ids, start, end, pages, states)
        return pending

    def _write(
        self,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: Sequence[Page],
        states: Sequence[tuple[int, int, State]],
    ) -> TierReply:
        visible_at = self.clock.now() + self.visibility_delay_s
        per_chunk = self.chunk_size // self.block_size
        keys = self._keyed.keys(tier_ids, end) if end > start else []
        refused = 0
        for i, key in enumerate(keys[start // self.chunk_size :]):
            chunk_pages = tuple(pages[i * per_chunk : (i + 1) * per_chunk])
            if len(chunk_pages) < per_chunk:
                break  # a partial chunk is not keyed
            if key not in self._chunks:
                if self.refuse_when_full and len(self._chunks) >= (self.capacity_chunks or 0):
                    # lmcache reserves no room for a chunk when L1 is full; every later
                    # chunk of the store is refused too (nothing is freed meanwhile).
                    refused = len(keys) - start // self.chunk_size - i
                    break
                self._chunks[key] = (visible_at, chunk_pages)
            self._chunks.move_to_end(key)
        if refused:
            self.refused_chunks += refused
            return TierReply(
                ok=False,
                error=f"store not kept: the tier had no room for {refused} chunks of "
                f"[{start}, {end}) (full)",
            )
        for position, state_key, state in states:
            if self.on_state_grid(position):
                self._states[state_key] = (visible_at, state)
        self._evict()
        return TierReply(ok=True)

    def _evict(self) -> None:
        if self.capacity_chunks is None or self.refuse_when_full:
            return
        while len(self._chunks) > self.capacity_chunks:
            self._chunks.popitem(last=False)

    def _background_evict(self) -> None:
        """Run the evictor's loop ticks that are due on the tier's clock: at each, when
        usage is at or above the watermark, drop the least recently used
        ``evict_ratio`` share of the chunks (``int``, as lmcache's LRU policy rounds)."""
        if not self.refuse_when_full:
            return
        now = self.clock.now()
        capacity = self.capacity_chunks or 0
        while self._next_evict <= now:
            batch = int(len(self._chunks) * self.evict_ratio)
            if len(self._chunks) < self.evict_watermark * capacity or batch == 0:
                # Nothing changes until the next store, which comes after this call:
                # every tick due now would do the same, so they are all skipped.
                ticks = math.floor((now - self._next_evict) / self.evict_interval_s) + 1
                self._next_evict += ticks * self.evict_interval_s
                break
            for _ in range(batch):
                self._chunks.popitem(last=False)
            self.evicted_chunks += batch
            self._next_evict += self.evict_interval_s

    def drop_chunk(self, tier_ids: Sequence[int], index: int) -> bool:
        """Remove the ``index``-th chunk of a prompt (an eviction by someone else)."""
        keys = chunk_keys(tier_ids, self.chunk_size)
        if index >= len(keys):
            return False
        return self._chunks.pop(keys[index], None) is not None

    def poll(self, ticket: object) -> TierReply | None:
        assert isinstance(ticket, _Pending)
        if self.refuse_when_full:
            self._background_evict()
        if ticket.reply is None and ticket.on_ready is not None:
            if self.clock.now() < ticket.ready_at:
                return None
            ticket.reply = ticket.on_ready()
            ticket.on_ready = None
        return ticket.reply

    @property
    def num_chunks(self) -> int:
        return len(self._chunks)
