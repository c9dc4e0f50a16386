"""HBM block pool with a prefix cache keyed by the seeded block-hash chain."""

from __future__ import annotations

from collections import deque
from typing import Sequence


class OutOfBlocks(RuntimeError):
    pass


class _FreeList:
    """Free blocks, least recently freed first: a list read from a moving head, and
    where each free block's entry is. A block taken from the middle (a cache hit)
    leaves a dead entry behind; while there is none, taking is one slice."""

    def __init__(self) -> None:
        self._order: list[int] = []
        self._head = 0  # entries before it were taken or passed
        self._base = 0  # the position of ``_order[0]`` (entries dropped from the front)
        self._at: dict[int, int] = {}  # free block -> position of its entry
        self._dead = 0  # dead entries from the head on

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, block: int) -> bool:
        return block in self._at

    def discard(self, block: int) -> None:
        if self._at.pop(block, None) is not None:
            self._dead += 1

    def extend(self, blocks: Sequence[int]) -> None:
        """Append blocks that are not free, each once, in order."""
        end = self._base + len(self._order)
        self._at.update(zip(blocks, range(end, end + len(blocks)), strict=True))
        self._order.extend(blocks)

    def take(self, k: int) -> list[int]:
        """The ``k`` least recently freed blocks (there are at least ``k``)."""
        order, head, at = self._order, self._head, self._at
        if not self._dead:
            out = order[head : head + k]
            head += k
            deque(map(at.__delitem__, out), maxlen=0)
        else:
            out = []
            while len(out) < k:
                b = order[head]
                if at.get(b) == self._base + head:
                    del at[b]
                    out.append(b)
                else:
                    self._dead -= 1
                head += 1
        if head > 1024 and 2 * head > len(order):  # drop what was read, now and then
            del order[:head]
            self._base += head
            head = 0
        self._head = head
        return out


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
        self._free = _FreeList()
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
            self._free.discard(b)
            refs[b] = refs.get(b, 0) + 1
        untouched = min(need, self.num_blocks - self._fresh)
        fresh = list(range(self._fresh, self._fresh + untouched))
        self._fresh += untouched
        if need > untouched:  # the least recently freed, taken in C
            reused = self._free.take(need - untouched)
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
            free.extend(blocks)
            return
        freed = []
        for b in blocks:
            n = refs[b] - 1
            if n:
                refs[b] = n
            else:
                del refs[b]
                freed.append(b)
        free.extend(freed)


class UncachedBlockPool:
    """The pool of an engine without a prefix cache (a hybrid model, or caching off).

    No block's content is ever looked up again, so blocks need no bookkeeping of their
    own: a freed request's blocks go back as one run, and runs are handed out least
    recently freed first, after the blocks never handed out. That is the order
    ``BlockPool`` hands blocks out in when nothing is cached, so a run gets the same
    blocks from either (and the same stale contents under a fault); a request costs a
    slice or two instead of a dict entry per block.
    """

    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self._fresh = 0  # blocks [_fresh, num_blocks) were never handed out
        self._runs: deque[list[int]] = deque()  # freed runs, least recently freed first
        self._freed = 0  # blocks in ``_runs``
        self._held = 0

    @property
    def num_free(self) -> int:
        return self.num_blocks - self._fresh + self._freed

    @property
    def num_held(self) -> int:
        """Blocks some request holds (allocated and not freed)."""
        return self._held

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free

    def match(self, chain: Sequence[int]) -> list[int]:
        return []  # nothing is cached

    def allocate(
        self, chain: Sequence[int], num_blocks: int, use_cache: bool
    ) -> tuple[list[int], int]:
        """``num_blocks`` blocks and 0 from the cache (there is none)."""
        if use_cache:
            raise ValueError("an uncached block pool has no prefix cache to use")
        if num_blocks > self.num_free:
            raise OutOfBlocks(f"need {num_blocks} blocks, {self.num_free} free")
        untouched = min(num_blocks, self.num_blocks - self._fresh)
        blocks = list(range(self._fresh, self._fresh + untouched))
        self._fresh += untouched
        need = num_blocks - untouched
        self._freed -= need
        runs = self._runs
        while need:
            run = runs[0]
            if len(run) <= need:
                runs.popleft()
                blocks += run
                need -= len(run)
            else:
                blocks += run[:need]
                runs[0] = run[need:]
                need = 0
        self._held += num_blocks
        return blocks, 0

    def commit(self, block: int, chain_hash: int) -> None:
        """Nothing is cached: a commit is forgotten."""

    def free(self, blocks: Sequence[int]) -> None:
        if len(blocks) > self._held:
            raise ValueError(f"{len(blocks)} blocks freed, {self._held} held")
        self._runs.append(list(blocks))
        self._freed += len(blocks)
        self._held -= len(blocks)
