"""Faults of the tier (tier <-> worker): lost or failed retrieve replies, eviction
right after a lookup, stores that become visible late."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from kvfault.faults.injectors.base import Trigger
from kvfault.faults.runs import Injector
from kvfault.reference.interfaces import (
    LookupQuery,
    LookupResult,
    Page,
    State,
    Tier,
    TierReply,
)
from kvfault.reference.types import OperationId


class _TierProxy:
    """Forwards everything to the wrapped tier; subclasses change one operation.
    Attributes a proxy does not define (``chunk_size``, ``drop_chunk``, ...) are the
    wrapped tier's, so proxies stack."""

    def __init__(self, inner: Tier):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def lookup(self, query: LookupQuery) -> LookupResult:
        return self._inner.lookup(query)

    def submit_retrieve(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        state_key: int | None,
    ) -> object:
        return self._inner.submit_retrieve(op, tier_ids, start, end, state_key)

    def submit_store(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: Sequence[Page],
        states: Sequence[tuple[int, int, State]],
    ) -> object:
        return self._inner.submit_store(op, tier_ids, start, end, pages, states)

    def poll(self, ticket: object) -> TierReply | None:
        return self._inner.poll(ticket)


def base_tier(tier: Any) -> Any:
    """The tier under every injector proxy."""
    while isinstance(tier, _TierProxy):
        tier = tier._inner
    return tier


@dataclass
class _Marked:
    """A ticket an injector chose: the wrapped tier's ticket plus the operation."""

    inner: object
    op: OperationId
    proxy: _TierProxy
    seen_reply: bool = False


class _RetrieveFault(Injector):
    """Shared plumbing of faults that hit chosen retrieves' replies."""

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._count = 0

    def choose(self) -> bool:
        self._count += 1
        return self.trigger.hits(self._count, self.rng)

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        raise NotImplementedError

    def wrap_tier(self, tier: Tier) -> Tier:
        injector = self

        class _Proxy(_TierProxy):
            def submit_retrieve(
                self,
                op: OperationId,
                tier_ids: Sequence[int],
                start: int,
                end: int,
                state_key: int | None,
            ) -> object:
                ticket = self._inner.submit_retrieve(op, tier_ids, start, end, state_key)
                return _Marked(ticket, op, self) if injector.choose() else ticket

            def poll(self, ticket: object) -> TierReply | None:
                if not (isinstance(ticket, _Marked) and ticket.proxy is self):
                    return self._inner.poll(ticket)
                reply = self._inner.poll(ticket.inner)
                if reply is None:
                    return None
                return injector.on_reply(ticket, reply)

        return _Proxy(tier)

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LostTierReply(_RetrieveFault):
    """The tier's reply to chosen retrieves (the ``nth`` retrieve of the run, or each
    with probability ``p``) never reaches the worker: the tier did the work, the
    answer is lost on the way back (as when a real LMCache handler raises)."""

    name = "lost_tier_reply"

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        if not marked.seen_reply:
            marked.seen_reply = True
            self.fire(op=marked.op, direction="tier->worker", ok=reply.ok)
        return None


class RetrieveFailure(_RetrieveFault):
    """Chosen retrieves fail: the tier answers ``ok=False`` instead of its data."""

    name = "retrieve_failure"

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        if not marked.seen_reply:
            marked.seen_reply = True
            self.fire(op=marked.op, would_have_been_ok=reply.ok)
        return TierReply(ok=False, error="injected retrieve failure")


class EvictAfterLookup(Injector):
    """Between a lookup hit and its retrieve, the tier drops one chunk of the range the
    retrieve asks for (someone else's store evicted it): ``chunk`` is the index of the
    dropped chunk within that range (negative counts from its end). Needs a tier with
    ``drop_chunk`` (the in-process tier)."""

    name = "evict_after_lookup"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, chunk: int = 0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.chunk = chunk
        self._count = 0

    def wrap_tier(self, tier: Tier) -> Tier:
        if not callable(getattr(base_tier(tier), "drop_chunk", None)):
            raise ValueError(f"{self.name} needs a tier with drop_chunk (the in-process tier)")
        injector = self

        class _Proxy(_TierProxy):
            def submit_retrieve(
                self,
                op: OperationId,
                tier_ids: Sequence[int],
                start: int,
                end: int,
                state_key: int | None,
            ) -> object:
                injector._count += 1
                if injector.trigger.hits(injector._count, injector.rng):
                    injector._evict(self, op, tier_ids, start, end)
                return self._inner.submit_retrieve(op, tier_ids, start, end, state_key)

        return _Proxy(tier)

    def _evict(
        self, proxy: _TierProxy, op: OperationId, tier_ids: Sequence[int], start: int, end: int
    ) -> None:
        size = proxy.chunk_size
        first, last = start // size, -(-end // size)  # chunks the retrieve reads
        chunks = list(range(first, last))
        if not chunks:
            return
        index = chunks[max(-len(chunks), min(self.chunk, len(chunks) - 1))]
        # drop_chunk keys whole chunks only: hand it the ids of the full chunks.
        ids = tuple(tier_ids[: min(len(tier_ids), (index + 1) * size)])
        if base_tier(proxy).drop_chunk(ids, index):
            self.fire(op=op, chunk=index, tokens=[index * size, (index + 1) * size])

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, chunk={self.chunk})"


class LateVisibility(Injector):
    """Chosen stores are acknowledged ``delay_s`` before their chunks become visible to
    lookups (the real LMCache server's reply comes a few ms before visibility). Uses
    the in-process tier's own ``visibility_delay_s``, so only chunks the store newly
    adds are late, exactly as that tier keys them."""

    name = "late_visibility"

    def __init__(
        self, nth: Sequence[int] = (), *, p: float = 0.0, delay_s: float = 5.0, seed: int = 0
    ):
        super().__init__(seed)
        if delay_s <= 0:
            raise ValueError(f"late_visibility delay_s must be positive, got {delay_s}")
        self.trigger = Trigger(tuple(nth), p)
        self.delay_s = delay_s
        self._count = 0

    def wrap_tier(self, tier: Tier) -> Tier:
        if not hasattr(base_tier(tier), "visibility_delay_s"):
            raise ValueError(
                f"{self.name} needs a tier with visibility_delay_s (the in-process tier)"
            )
        injector = self

        class _Proxy(_TierProxy):
            def submit_store(
                self,
                op: OperationId,
                tier_ids: Sequence[int],
                start: int,
                end: int,
                pages: Sequence[Page],
                states: Sequence[tuple[int, int, State]],
            ) -> object:
                ticket = self._inner.submit_store(op, tier_ids, start, end, pages, states)
                injector._count += 1
                if injector.trigger.hits(injector._count, injector.rng):
                    return _Marked(ticket, op, self)
                return ticket

            def poll(self, ticket: object) -> TierReply | None:
                if not (isinstance(ticket, _Marked) and ticket.proxy is self):
                    return self._inner.poll(ticket)
                # The in-process tier writes (and stamps visibility) when a poll first
                # sees the store complete: delay visibility for exactly that poll.
                base = base_tier(self)
                saved = base.visibility_delay_s
                base.visibility_delay_s = saved + injector.delay_s
                try:
                    reply = self._inner.poll(ticket.inner)
                finally:
                    base.visibility_delay_s = saved
                if reply is not None and not ticket.seen_reply:
                    ticket.seen_reply = True
                    if reply.ok:
                        injector.fire(op=ticket.op, delay_s=injector.delay_s)
                return reply

        return _Proxy(tier)

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, delay_s={self.delay_s:g})"
