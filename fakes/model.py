"""Deterministic model: KV and state are fingerprints that depend on every prior token.

- Page ``b`` of a request holds ``H(page[b-1], ids of block b)`` read from HBM as it
  actually is, so a wrong restored page changes every page after it. The chain starts
  from the request's ``cache_seed``: two pictures with the same placeholder ids have
  different KV.
- Hybrids carry a recurrent state: ``s(b+1) = H(s(b), ids of block b)``. The slot holds
  the state at the block boundary at or below the position computed so far; the model
  trusts the position the scheduler claims, so a state restored for another position
  changes the output.
- The output tokens are a function of every page and the final state. A run with tier
  hits therefore produces the cold output only if every restore was right.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

from kvfault.reference.interfaces import KvPages
from kvfault.reference.types import Geometry, ModelKind, Request

_KV_TAG = 0x4B56  # ints only: tuple hashes of ints ignore PYTHONHASHSEED
_STATE_TAG = 0x5354
_OUT_TAG = 0x4F55


def _block_ids(ids: Sequence[int], start: int, end: int) -> tuple[int, ...]:
    return tuple(ids[start:end])


@dataclass(frozen=True)
class ConstantForwardTimer:
    """A forward costs ``base_s`` plus ``per_token_s`` per computed token."""

    base_s: float = 0.02
    per_token_s: float = 2e-6

    def duration(self, forward_index: int, num_tokens: int) -> float:
        return self.base_s + self.per_token_s * num_tokens


class DeterministicModel:
    """Computes pages and states of token ranges in place in ``KvPages``."""

    def __init__(self, kind: ModelKind, geometry: Geometry):
        if kind not in ("dense", "hybrid"):
            raise ValueError(f"model kind must be 'dense' or 'hybrid', got {kind!r}")
        self.kind: ModelKind = kind
        self.geometry = geometry
        # Cold pages by (cache_seed, prompt): a checker asks for each prompt's several
        # times (every output, every restore, every resend of the prompt).
        self._cold: dict[tuple[int, tuple[int, ...]], list[int]] = {}

    @property
    def hybrid(self) -> bool:
        return self.kind == "hybrid"

    def initial_page_parent(self, req: Request) -> int:
        return hash((_KV_TAG, req.cache_seed))

    def initial_state(self, req: Request) -> int:
        return hash((_STATE_TAG, req.cache_seed))

    def compute(
        self, kv: KvPages, req: Request, blocks: Sequence[int], start: int, end: int
    ) -> None:
        """Compute tokens ``[start, end)``: pages from the block holding ``start`` on,
        each from the page before it in HBM; for hybrids, the state from the slot."""
        bs = self.geometry.block_size
        ids = tuple(req.prompt_token_ids)  # a tuple's slices are tuples: hashable blocks
        first = start // bs
        parent = self.initial_page_parent(req) if first == 0 else kv.read(blocks[first - 1])
        parent = 0 if parent is None else parent
        state = None
        if self.hybrid:
            state = kv.read_state(req.req_id)
            if state is None or start == 0:
                state = self.initial_state(req)
        full = end // bs  # blocks [first, full) are whole; one partial block may follow
        pages: list[int] = []  # a simulated page is the hash of its chain
        append = pages.append
        # The whole blocks as tuples, cut in C: one iterator repeated bs times.
        whole = zip(*[iter(ids[first * bs : full * bs])] * bs, strict=True)
        if state is None:
            for block in whole:
                parent = hash((parent, block))
                append(parent)
        else:
            for block in whole:
                parent = hash((parent, block))
                append(parent)
                state = hash((state, block))
        if end > full * bs:
            parent = hash((parent, ids[full * bs : end]))
            append(parent)
        targets = blocks[first : first + len(pages)]
        if len(targets) < len(pages):
            raise IndexError(f"{len(blocks)} blocks for tokens [{start}, {end})")
        deque(map(kv.write, targets, pages), maxlen=0)
        if state is not None:
            kv.write_state(req.req_id, state)

    def output(self, kv: KvPages, req: Request, blocks: Sequence[int]) -> tuple[int, ...]:
        """The output tokens, read from every page of the prompt and the final state."""
        n = -(-req.prompt_len // self.geometry.block_size)
        pages = tuple(map(kv.read, blocks[:n]))
        state = kv.read_state(req.req_id) if self.hybrid else 0
        # None hashes by address in Python 3.11: map a missing page to 0 so outputs
        # are the same in every process.
        if None in pages:
            pages = tuple(0 if p is None else p for p in pages)
        fp = hash((_OUT_TAG, pages, 0 if state is None else state))
        return tuple(hash((fp, k)) & 0xFFFF for k in range(req.max_output_tokens))

    # -- the cold run, computed directly (what recompute would produce) ------------
    def cold_pages(self, req: Request) -> list[int]:
        """Every page of the prompt as a cold run computes it (do not modify)."""
        key = (req.cache_seed, req.prompt_token_ids)
        if key in self._cold:
            return self._cold[key]
        bs = self.geometry.block_size
        ids = req.prompt_token_ids
        parent = self.initial_page_parent(req)
        pages = []
        for lo in range(0, req.prompt_len, bs):
            parent = hash((parent, _block_ids(ids, lo, min(lo + bs, req.prompt_len))))
            pages.append(parent)
        self._cold[key] = pages
        return pages

    def cold_state_at(self, req: Request, position: int) -> int:
        """The state after ``position`` tokens (a block boundary)."""
        bs = self.geometry.block_size
        state = self.initial_state(req)
        for lo in range(0, position - position % bs, bs):
            state = hash((state, _block_ids(req.prompt_token_ids, lo, lo + bs)))
        return state

    def cold_output(self, req: Request) -> tuple[int, ...]:
        pages = tuple(self.cold_pages(req))
        state = self.cold_state_at(req, req.prompt_len) if self.hybrid else 0
        fp = hash((_OUT_TAG, pages, state))
        return tuple(hash((fp, k)) & 0xFFFF for k in range(req.max_output_tokens))
