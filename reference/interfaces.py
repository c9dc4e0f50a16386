"""The collaborators the reference stack takes as constructor arguments.

A fault injector wraps one of these; the reference stack never asks whether a fault is
on. Each protocol is small so that a simulated, a real-time and a faulty version can
stand in for one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from kvfault.reference.types import Completion, OperationId, StateGrid

# Content of one HBM page / tier block. The simulator uses 64-bit fingerprints (ints);
# the real-time tiers use tensors. The stack itself never looks inside.
Page = Any
State = Any


class Clock(Protocol):
    """Seconds since an arbitrary origin. ``sleep`` is how the engine lets time pass."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class ForwardTimer(Protocol):
    """How long the forward of one engine step takes (the first one may compile)."""

    def duration(self, forward_index: int, num_tokens: int) -> float: ...


@dataclass(frozen=True)
class LookupQuery:
    """Tier ids of a prompt plus the candidate state images ``(position, key)``."""

    tier_ids: tuple[int, ...]
    state_candidates: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class LookupResult:
    kv_hit: int  # contiguous-prefix hit in tokens, a multiple of the chunk size
    state_positions: tuple[int, ...] = ()  # positions of candidates the tier holds


class LookupClient(Protocol):
    """The scheduler's view of the tier: how much of a prompt it holds."""

    def lookup(self, query: LookupQuery) -> LookupResult: ...


@dataclass
class TierReply:
    """A terminal answer of the tier to one submitted retrieve or store."""

    ok: bool
    pages: list[Page] = field(default_factory=list)  # one per block, retrieve only
    state: State | None = None
    error: str = ""


class Tier(LookupClient, Protocol):
    """A KV tier with LMCache semantics: chunk keys, contiguous-prefix lookup,
    asynchronous completion, state images kept only on ``state_grid``.

    ``tier_ids`` may run past ``end`` (the scheduler passes one tuple of the whole
    prompt's ids to every call): a store keys the full chunks of ``tier_ids[:end]``, a
    retrieve the chunks covering ``[start, end)``; nothing past them is read."""

    chunk_size: int
    block_size: int
    state_grid: StateGrid

    def submit_retrieve(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        state_key: int | None,
    ) -> object: ...

    def submit_store(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: Sequence[Page],
        states: Sequence[tuple[int, int, State]],
    ) -> object: ...

    def poll(self, ticket: object) -> TierReply | None:
        """The reply once terminal, else None. Never blocks."""
        ...


class KvPages(Protocol):
    """HBM: paged KV plus one recurrent-state slot per request (hybrids)."""

    num_blocks: int

    def read(self, block: int) -> Page: ...

    def write(self, block: int, page: Page) -> None: ...

    def read_state(self, req_id: str) -> State | None: ...

    def write_state(self, req_id: str, state: State | None) -> None: ...


class CopyEngine(Protocol):
    """Restore copies tier pages into HBM. ``enqueue`` may raise ``RestoreFenceError``;
    completion is only observed by polling ``is_complete``."""

    def enqueue(
        self,
        op: OperationId,
        pages: Sequence[Page],
        blocks: Sequence[int],
        state: State | None,
        req_id: str,
    ) -> object: ...

    def is_complete(self, ticket: object) -> bool: ...


class CompletionChannel(Protocol):
    """Worker to scheduler: terminal reports, delivered at the next step."""

    def put(self, completions: Sequence[Completion]) -> None: ...

    def take(self) -> list[Completion]: ...
