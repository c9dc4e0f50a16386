"""Plain data of the reference offload stack: requests, geometry, operations, metadata.

Everything here is a dataclass with no behaviour beyond derived values, so a plan, a
trace or a test can build and compare them freely.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

ModelKind = Literal["dense", "hybrid"]
StateGrid = Literal["block", "chunk"]

TEXT_CACHE_SEED = -1


@dataclass(frozen=True)
class Geometry:
    """Block (HBM page) and chunk (tier) sizes in tokens, and the prefill budget per step."""

    block_size: int = 16
    chunk_size: int = 256
    prefill_budget: int = 2048
    state_checkpoint_interval: int = 1024

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.chunk_size <= 0 or self.chunk_size % self.block_size:
            raise ValueError(
                f"chunk_size ({self.chunk_size}) must be a positive multiple of "
                f"block_size ({self.block_size})"
            )
        if self.prefill_budget < self.block_size:
            raise ValueError(
                f"prefill_budget ({self.prefill_budget}) must be at least one block "
                f"({self.block_size})"
            )
        if self.state_checkpoint_interval <= 0 or self.state_checkpoint_interval % self.chunk_size:
            raise ValueError(
                f"state_checkpoint_interval ({self.state_checkpoint_interval}) must be a "
                f"positive multiple of chunk_size ({self.chunk_size})"
            )

    def floor_block(self, tokens: int) -> int:
        return tokens - tokens % self.block_size

    def floor_chunk(self, tokens: int) -> int:
        return tokens - tokens % self.chunk_size

    def ceil_chunk(self, tokens: int) -> int:
        return -(-tokens // self.chunk_size) * self.chunk_size


@dataclass(frozen=True)
class Request:
    """One sequence as the engine receives it.

    ``req_id`` is a string as real engines use (set order over such ids depends on
    PYTHONHASHSEED). ``media`` holds the bytes of each picture; the placeholder ids in
    ``prompt_token_ids`` are the same for every picture. ``cache_seed`` is -1 for text,
    else a 64-bit digest of the media (see ``kvfault.reference.rules.keys.media_cache_seed``).
    """

    req_id: str
    prompt_token_ids: tuple[int, ...]
    cache_seed: int = TEXT_CACHE_SEED
    media: tuple[bytes, ...] = ()
    max_output_tokens: int = 4
    arrival_time: float = 0.0

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.req_id!r} has an empty prompt")
        if self.max_output_tokens < 1:
            raise ValueError(f"request {self.req_id!r}: max_output_tokens must be >= 1")

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


class OpKind(str, enum.Enum):
    LOAD = "load"
    SAVE = "save"


@dataclass(frozen=True, order=True)
class OperationId:
    """An exact operation: a request id plus a scheduler-lifetime generation.

    A completion for a raw request id can never retire one of these.
    """

    req_id: str
    generation: int
    kind: OpKind = OpKind.LOAD

    def __post_init__(self) -> None:
        # Both are asked for on every bound restart and trace line: computed once.
        # An Enum hashes by its name's string hash (PYTHONHASHSEED); keep the kind's
        # part fixed so only the request id's hash decides set order.
        object.__setattr__(
            self, "_hash", hash((self.req_id, self.generation, self.kind is OpKind.LOAD))
        )
        object.__setattr__(self, "_str", f"{self.kind._value_}:{self.req_id}#{self.generation}")

    def __reduce__(self) -> tuple[Any, ...]:  # the hash is per process: rebuilt on unpickling
        return (OperationId, (self.req_id, self.generation, self.kind))

    def __str__(self) -> str:
        return self._str  # type: ignore[attr-defined]  # set in __post_init__, not a field

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]  # set in __post_init__, not a field


@dataclass(frozen=True)
class LoadOp:
    """Restore ``[start, kv_end)`` of KV from the tier into ``blocks`` (one per page of
    that range), and the state image at ``claim`` for hybrids. The request resumes
    computing at ``claim``. ``tier_ids`` are the whole prompt's: the tier keys only
    the chunks covering ``[0, kv_end)``."""

    op: OperationId
    tier_ids: tuple[int, ...]
    kv_end: int
    claim: int
    blocks: tuple[int, ...]
    state_key: int | None = None
    start: int = 0  # first token transferred (chunk-aligned; below it HBM already holds)


@dataclass(frozen=True)
class SaveOp:
    """Store KV chunks ``[start, end)`` (and the state images named in ``states``).
    ``tier_ids`` are the whole prompt's: the tier keys only ``[0, end)``."""

    op: OperationId
    tier_ids: tuple[int, ...]
    start: int
    end: int
    blocks: tuple[int, ...]
    states: tuple[tuple[int, int], ...] = ()  # (position, state key) pairs


@dataclass
class StepMeta:
    """What the scheduler hands the worker for one step, in dispatch order."""

    step: int
    loads: list[LoadOp] = field(default_factory=list)
    saves: list[SaveOp] = field(default_factory=list)
    # (req_id, start, end) token ranges the forward computes this step
    compute: list[tuple[str, int, int]] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)  # requests producing one token


class Outcome(str, enum.Enum):
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Completion:
    """A terminal report of one operation, worker to scheduler."""

    op: OperationId
    outcome: Outcome
    reason: str = ""
