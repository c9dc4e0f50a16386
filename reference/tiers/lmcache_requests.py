"""The lmcache request protocol of ``LMCacheTier`` (its base class): which requests
each operation sends to the server, in which order, and what it makes of the answers.

Every operation (a lookup, a retrieve, a store, their state images) is a generator: it
yields each request's future (tagged with its stage, for ``LMCacheTicket.stage``) or
``_BACKOFF`` when it must ask again later, is sent each answer, and returns its result
(a ``TierReply`` for a retrieve or store). ``LMCacheTier`` drives them: blocking for a
lookup, one answered request per ``poll`` for a ticket. Reads the tier's ``client``,
its registered instances and contexts, and the names and sizes set at construction.
"""

from __future__ import annotations

from typing import Any, Generator, Sequence

from kvfault.reference.interfaces import Page, State, TierReply
from kvfault.reference.tiers.lmcache_pages import _U32, _U64, PageFormat, _PageCodec

_STATE_TAG = 0x6B765354  # "kvST": first id of every state-image key


class _Backoff:
    """Yielded by an operation that must ask again later (prefetch still running)."""


_BACKOFF = _Backoff()

Step = Generator[Any, Any, TierReply]


class _Requests(_PageCodec):
    """Each operation of ``LMCacheTier`` as a generator of lmcache requests (see the
    module docstring); the tier drives them."""

    _Key: Any
    client: Any
    chunk_size: int
    model_name: str
    state_model_name: str
    page_format: PageFormat
    verify_stores: bool
    _rid: Any  # itertools.count
    _rid_prefix: str
    _closed: bool
    _kv_iid: int
    _kv_ctx: Any
    _st_iid: int
    _st_ctx: Any

    # -- keys ---------------------------------------------------------------------------
    def _new_rid(self, what: str) -> str:
        return f"{self._rid_prefix}-{what}-{next(self._rid)}"

    def _key(
        self, model: str, ids: Sequence[int], start: int, end: int, rid: str,
        worker: int | None,
    ) -> Any:  # fmt: skip
        return self._Key(
            model_name=model, world_size=1, worker_id=worker, token_ids=tuple(ids),
            start=start, end=end, request_id=rid, num_kv_readers=1,
        )  # fmt: skip

    def state_ids(self, state_key: int) -> tuple[int, ...]:
        """The ``chunk_size`` ids naming a state image (each in ``[0, 2**32)``)."""
        k = state_key & _U64
        head = (_STATE_TAG, k & _U32, (k >> 32) & _U32)
        return head + tuple(range(3, self.chunk_size))

    # -- lookup ---------------------------------------------------------------------------
    def _lookup_gen(
        self, model: str, ids: Sequence[int], end: int
    ) -> Generator[Any, Any, int | None]:
        """Lookup, wait for the prefetch, release its locks: chunks hit."""
        rid = self._new_rid("lookup")
        hit = yield from self._locked_lookup(model, ids, end, rid)
        if hit:
            yield self.client.free_lookup_locks(
                self._key(model, ids, 0, hit * self.chunk_size, rid, None), 1
            )
        self._end_session(rid)
        return hit

    def _locked_lookup(
        self, model: str, ids: Sequence[int], end: int, rid: str
    ) -> Generator[Any, Any, int]:
        """Lookup that leaves its read locks held (a retrieve consumes them)."""
        yield self.client.lookup(self._key(model, ids, 0, end, rid, None), 1)
        while True:
            chunks = yield self.client.query_prefetch_status(rid)
            if chunks is not None:
                return int(chunks)
            yield _BACKOFF

    def _end_session(self, rid: str) -> None:
        """Fire and forget: drop the server's session of ``rid`` (it also refreshes the
        LRU position of the keys the session touched). Safe from a finalizer."""
        if self._closed:
            return
        try:
            self.client.end_session(rid)
        except Exception:
            pass

    # -- retrieve and store -----------------------------------------------------------
    def _rpc(self, stage: str, future: Any) -> Any:
        try:
            future._kvf_stage = stage
        except AttributeError:  # pragma: no cover - slots
            pass
        return future

    def _retrieve_gen(
        self, tier_ids: Sequence[int], start: int, end: int, state_key: int | None
    ) -> Step:
        torch = self._torch
        cs, bs = self.chunk_size, self.block_size
        end_al = -(-end // cs) * cs
        if end <= start:
            return TierReply(ok=True, pages=[], state=None)
        if end_al > len(tier_ids):
            return TierReply(ok=False, error=f"range [{start}, {end}) is not keyed")
        ids = tuple(tier_ids[:end_al])
        rid = self._new_rid("retrieve")
        try:
            hit = yield from self._stage(
                self._locked_lookup(self.model_name, ids, end_al, rid), "lookup"
            )
            if hit * cs < end_al:
                if hit:
                    yield self._rpc(
                        "free_lookup_locks",
                        self.client.free_lookup_locks(
                            self._key(self.model_name, ids, 0, hit * cs, rid, None), 1
                        ),
                    )
                return TierReply(ok=False, error="chunk evicted before retrieve")
            first = start - start % cs  # off-grid start goes to the server as is
            key = self._key(self.model_name, ids, start if start % cs else first, end_al, rid, 0)
            resp = yield self._rpc(
                "prepare_retrieve", self.client.prepare_retrieve(key, self._kv_iid)
            )
            if not resp.success:
                yield self._rpc(
                    "free_lookup_locks",
                    self.client.free_lookup_locks(
                        self._key(self.model_name, ids, 0, end_al, rid, None), 1
                    ),
                )
                return TierReply(ok=False, error="chunk evicted before retrieve")
            slots = self._kv_ctx._build_slot_tensors(resp.context.get("slots", []))
            pages: list[Page] = []
            error = ""
            skip = (start - first) // bs
            want = (end - start) // bs
            per_chunk = cs // bs
            for ci, slot in enumerate(slots):
                lo = max(skip - ci * per_chunk, 0)
                hi = min(skip + want - ci * per_chunk, per_chunk)
                if lo >= hi:
                    continue
                if self.page_format == "tensor":
                    # The slot is released at commit: copy it out, once per chunk.
                    pages.extend(self._copy_out(slot, lo, hi))
                    continue
                for b in range(lo, hi):
                    fp = self._decode(self._block_view(slot, b).view(torch.int16))
                    if fp is None:
                        idx = ci * per_chunk + b
                        error = error or f"page {idx} of [{first}, {end_al}) corrupted"
                    pages.append(fp)
            del slots
            yield self._rpc("commit_retrieve", self.client.commit_retrieve(key, self._kv_iid))
            if first:
                yield self._rpc(
                    "free_lookup_locks",
                    self.client.free_lookup_locks(
                        self._key(self.model_name, ids, 0, first, rid, None), 1
                    ),
                )
            if error:
                return TierReply(ok=False, error=error)
            if len(pages) != want:
                return TierReply(ok=False, error=f"got {len(pages)} pages, wanted {want}")
            state = None
            if state_key is not None:
                state, err = yield from self._retrieve_state(state_key)
                if err:
                    return TierReply(ok=False, error=err)
            return TierReply(ok=True, pages=pages, state=state)
        finally:
            self._end_session(rid)

    def _stage(self, gen: Generator[Any, Any, Any], stage: str) -> Generator[Any, Any, Any]:
        """Tag every request ``gen`` yields with ``stage`` (for ``ticket.stage``)."""
        value: Any = None
        while True:
            try:
                nxt = gen.send(value)
            except StopIteration as stop:
                return stop.value
            if nxt is not _BACKOFF:
                self._rpc(f"{stage}:{getattr(nxt, '_kvf_stage', '')}".rstrip(":"), nxt)
            value = yield nxt

    def _retrieve_state(self, state_key: int) -> Generator[Any, Any, tuple[Any, str]]:
        torch = self._torch
        model, sids = self.state_model_name, self.state_ids(state_key)
        rid = self._new_rid("state")
        try:
            hit = yield from self._stage(
                self._locked_lookup(model, sids, len(sids), rid), "state_lookup"
            )
            if hit < 1:
                return None, "state image evicted before retrieve"
            key = self._key(model, sids, 0, len(sids), rid, 0)
            resp = yield self._rpc(
                "state_prepare_retrieve", self.client.prepare_retrieve(key, self._st_iid)
            )
            if not resp.success:
                yield self.client.free_lookup_locks(
                    self._key(model, sids, 0, len(sids), rid, None), 1
                )
                return None, "state image evicted before retrieve"
            (slot,) = self._st_ctx._build_slot_tensors(resp.context.get("slots", []))
            state = self._decode(slot.view(torch.int16))
            del slot
            yield self._rpc("state_commit_retrieve", self.client.commit_retrieve(key, self._st_iid))
            if state is None:
                return None, "state image corrupted"
            return state, ""
        finally:
            self._end_session(rid)

    def _store_gen(
        self,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: list[Page],
        states: list[tuple[int, int, State]],
    ) -> Step:
        torch = self._torch
        cs, bs = self.chunk_size, self.block_size
        full_end = min(end, len(tier_ids))
        full_end -= full_end % cs  # a partial chunk is not keyed
        per_chunk = cs // bs
        if full_end > start:
            ids = tuple(tier_ids[:full_end])
            rid = self._new_rid("store")
            key = self._key(self.model_name, ids, start, full_end, rid, 0)
            try:
                resp = yield self._rpc(
                    "prepare_store", self.client.prepare_store(key, self._kv_iid)
                )
                ctx = resp.context if isinstance(resp.context, dict) else {}
                slots = self._kv_ctx._build_slot_tensors(ctx.get("slots") or [])
                indices: list[int] = list(ctx.get("chunk_indices") or [])
                try:
                    for slot, ci in zip(slots, indices, strict=True):
                        chunk_pages = pages[ci * per_chunk : (ci + 1) * per_chunk]
                        if len(chunk_pages) != per_chunk:
                            raise IndexError(
                                f"{len(pages)} pages do not cover chunk {ci} of the store"
                            )
                        if self.page_format == "tensor":
                            self._copy_in(slot, chunk_pages)
                            continue
                        for b, page in enumerate(chunk_pages):
                            self._encode_into(self._block_view(slot, b).view(torch.int16), page)
                finally:
                    del slots
                if indices:
                    ok = yield self._rpc(
                        "commit_store", self.client.commit_store(key, self._kv_iid, b"")
                    )
                    if not ok:
                        return TierReply(ok=False, error="commit_store returned False")
            finally:
                self._end_session(rid)
            if self.verify_stores and len(indices) < (full_end - start) // cs:
                # lmcache answers "nothing to write" both when a chunk is already held
                # and when its pool had no room for it (lmcache's own client reads both
                # as "already cached"); only a lookup tells them apart.
                hit = yield from self._stage(
                    self._lookup_gen(self.model_name, ids, full_end), "verify_lookup"
                )
                if (hit or 0) * cs < full_end:
                    return TierReply(
                        ok=False,
                        error=f"store not kept: the server reserved no room for chunks "
                        f"of [{start}, {full_end}) (pool full)",
                    )
        for position, skey, state in states:
            if position <= 0 or position % cs:
                continue  # the MP server keeps state images only on its chunk grid
            err = yield from self._store_state(skey, state)
            if err:
                return TierReply(ok=False, error=err)
        return TierReply(ok=True)

    def _store_state(self, state_key: int, state: State) -> Generator[Any, Any, str]:
        torch = self._torch
        model, sids = self.state_model_name, self.state_ids(state_key)
        rid = self._new_rid("state")
        key = self._key(model, sids, 0, len(sids), rid, 0)
        try:
            resp = yield self._rpc(
                "state_prepare_store", self.client.prepare_store(key, self._st_iid)
            )
            ctx = resp.context if isinstance(resp.context, dict) else {}
            slots = self._st_ctx._build_slot_tensors(ctx.get("slots") or [])
            if not slots:
                return ""  # already held
            self._encode_into(slots[0].view(torch.int16), state)
            del slots
            ok = yield self._rpc(
                "state_commit_store", self.client.commit_store(key, self._st_iid, b"")
            )
            return "" if ok else "state commit_store returned False"
        finally:
            self._end_session(rid)
