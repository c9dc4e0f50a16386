"""HBM block pool with a prefix cache keyed by the seeded block-hash chain."""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import islice
from typing import Sequence


class OutOfBlocks(RuntimeError):
    pass


class BlockPool:
    """Blocks are handed out to requests; a freed block keeps its cached content (and
    its chain hash) until it is reused, least recently freed first."""

    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        # The free blocks in reuse order: first those never handed out, ``[_fresh,
        # num_blocks)`` in order (kept as a range: an engine builds a pool on every
        # restart), then the freed ones, least recently freed first.
        self._fresh = 0
        self._free: OrderedDict[int, None] = OrderedDict()
        self._cached: dict[int, int] = {}  # chain hash -> block
        self._hash_of: dict[int, int] = {}  # block -> chain hash
        self._refs: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return self.num_blocks - self._fresh + len(self._free)

    def _is_free(self, block: int) -> bool:
        return block >= self._fresh or block in self._free

    @property
    def num_held(self) -> int:
        """Blocks some request holds (allocated and not freed)."""
        return len(self._refs)

    def match(self, chain: Sequence[int]) -> list[int]:
        """Cached blocks holding the longest prefix of ``chain``."""
        hit: list[int] = []
        for h in chain:
            block = self._cached.get(h)
            if block is None:
                break
            hit.append(block)
        return hit

    def allocate(
        self, chain: Sequence[int], num_blocks: int, use_cache: bool
    ) -> tuple[list[int], int]:
        """Blocks for a request of ``num_blocks``; reuses cached prefix blocks when
        ``use_cache``. Returns the blocks and how many came from the cache."""
        hit = self.match(chain) if use_cache else []
        hit = hit[:num_blocks]
        need = num_blocks - len(hit)
        reusable = [b for b in hit if self._is_free(b)]
        if need > self.num_free - len(reusable):
            raise OutOfBlocks(f"need {need} blocks, {self.num_free - len(reusable)} free")
        refs = self._refs
        for b in hit:  # a cached block was handed out before: it is never in the range
            self._free.pop(b, None)
            refs[b] = refs.get(b, 0) + 1
        untouched = min(need, self.num_blocks - self._fresh)
        fresh = list(range(self._fresh, self._fresh + untouched))
        self._fresh += untouched
        if need > untouched:  # the least recently freed, taken in C
            reused = list(islice(self._free, need - untouched))
            deque(map(self._free.__delitem__, reused), maxlen=0)
            if self._hash_of:  # nothing is cached when nothing was ever committed
                for b in reused:
                    self._uncache(b)
            fresh += reused
        refs.update(dict.fromkeys(fresh, 1))
        return hit + fresh, len(hit)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free

    def commit(self, block: int, chain_hash: int) -> None:
        """``block`` now holds the content named ``chain_hash``."""
        if self._cached.get(chain_hash, block) != block:
            return  # another block already holds this content
        self._uncache(block)
        self._cached[chain_hash] = block
        self._hash_of[block] = chain_hash

    def _uncache(self, block: int) -> None:
        h = self._hash_of.pop(block, None)
        if h is not None and self._cached.get(h) == block:
            del self._cached[h]

    def free(self, blocks: Sequence[int]) -> None:
        refs, free = self._refs, self._free
        if list(map(refs.__getitem__, blocks)).count(1) == len(blocks) == len(set(blocks)):
            # Each held once (no prefix cache shares them): all freed, in order, in C.
            deque(map(refs.__delitem__, blocks), maxlen=0)
            free.update(dict.fromkeys(blocks))
            return
        for b in blocks:
            n = refs[b] - 1
            if n:
                refs[b] = n
            else:
                del refs[b]
                free[b] = None
