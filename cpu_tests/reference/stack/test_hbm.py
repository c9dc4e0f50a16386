"""The HBM block pool: allocation, reuse order, the prefix cache, reference counts."""

from __future__ import annotations

import pytest

from kvfault.reference.stack import BlockPool, OutOfBlocks, UncachedBlockPool


def test_blocks_never_handed_out_go_first_in_order_then_the_least_recently_freed():
    pool = BlockPool(6)
    a, _ = pool.allocate([], 2, use_cache=False)
    b, _ = pool.allocate([], 2, use_cache=False)
    assert (a, b) == ([0, 1], [2, 3]) and pool.num_free == 2
    pool.free(b)
    pool.free(a)
    assert pool.num_free == 6
    c, _ = pool.allocate([], 5, use_cache=False)
    assert c == [4, 5, 2, 3, 0]
    assert pool.num_free == 1 and pool.can_allocate(1) and not pool.can_allocate(2)
    with pytest.raises(OutOfBlocks):
        pool.allocate([], 2, use_cache=False)


def test_a_freed_block_keeps_its_content_until_reused():
    pool = BlockPool(4)
    blocks, cached = pool.allocate([11, 12], 2, use_cache=True)
    assert cached == 0
    for block, h in zip(blocks, [11, 12], strict=True):
        pool.commit(block, h)
    pool.free(blocks)
    again, cached = pool.allocate([11, 12, 13], 3, use_cache=True)
    assert cached == 2 and again[:2] == blocks and again[2] == 2
    assert pool.num_free == 1


@pytest.mark.parametrize("n", [0, -1])
def test_a_pool_needs_at_least_one_block(n):
    with pytest.raises(ValueError, match=f"num_blocks must be positive, got {n}"):
        BlockPool(n)


def test_a_one_block_pool_hands_out_its_block():
    pool = BlockPool(1)
    assert pool.allocate([], 1, use_cache=True) == ([0], 0)
    assert pool.num_free == 0


def test_fresh_blocks_come_in_order_and_free_gives_them_back():
    pool = BlockPool(4)
    blocks, hit = pool.allocate([], 3, use_cache=True)
    assert (blocks, hit, pool.num_free) == ([0, 1, 2], 0, 1)
    assert pool.can_allocate(1) and not pool.can_allocate(2)
    pool.free(blocks)
    assert pool.num_free == 4 and pool.can_allocate(4)


def test_out_of_blocks_names_the_need():
    pool = BlockPool(2)
    pool.allocate([], 1, use_cache=False)
    with pytest.raises(OutOfBlocks, match="need 2 blocks, 1 free"):
        pool.allocate([], 2, use_cache=False)
    assert pool.num_free == 1


def test_committed_blocks_match_the_longest_cached_prefix():
    pool = BlockPool(4)
    blocks, _ = pool.allocate([], 3, use_cache=True)
    for b, h in zip(blocks, [10, 11, 12], strict=True):
        pool.commit(b, h)
    assert pool.match([10, 11, 12, 13]) == [0, 1, 2]
    assert pool.match([10, 99, 12]) == [0]
    assert pool.match([99, 10]) == []


def test_a_cached_prefix_is_shared_and_counted_per_holder():
    pool = BlockPool(4)
    a, _ = pool.allocate([], 2, use_cache=True)
    pool.commit(a[0], 10)
    pool.commit(a[1], 11)
    b, hit = pool.allocate([10, 11, 12], 3, use_cache=True)
    assert (b[:2], hit) == (a, 2)
    assert pool.num_free == 1
    pool.free(a)
    assert pool.num_free == 1  # b still holds the shared blocks
    pool.free(b)
    assert pool.num_free == 4


def test_without_the_cache_no_block_is_shared():
    pool = BlockPool(4)
    a, _ = pool.allocate([], 1, use_cache=True)
    pool.commit(a[0], 10)
    b, hit = pool.allocate([10], 1, use_cache=False)
    assert hit == 0 and b != a


def test_a_freed_cached_block_is_reused_for_its_content():
    pool = BlockPool(2)
    a, _ = pool.allocate([], 1, use_cache=True)
    pool.commit(a[0], 10)
    pool.free(a)
    again, hit = pool.allocate([10], 1, use_cache=True)
    assert (again, hit) == (a, 1)
    assert pool.num_free == 1


def test_the_hit_is_cut_to_the_request_and_counts_free_cached_blocks_once():
    pool = BlockPool(3)
    a, _ = pool.allocate([], 3, use_cache=True)
    for b, h in zip(a, [10, 11, 12], strict=True):
        pool.commit(b, h)
    pool.free(a)
    # Two cached blocks are free and reused; the third block is fresh but the only
    # free block left is the cached 12, which is evicted for it.
    blocks, hit = pool.allocate([10, 11, 12], 2, use_cache=True)
    assert (blocks, hit) == ([0, 1], 2)
    # 3 blocks wanted, 3 free, of which 2 are the cached hit: fits exactly.
    pool.free(blocks)
    blocks, hit = pool.allocate([10, 11], 3, use_cache=True)
    assert (hit, pool.num_free) == (2, 0)
    assert pool.match([10, 11, 12]) == [0, 1]  # block 2 was reused: 12 is gone


def test_reuse_takes_the_least_recently_freed_block_and_evicts_its_content():
    pool = BlockPool(3)
    blocks, _ = pool.allocate([], 3, use_cache=True)
    for b, h in zip(blocks, [10, 11, 12], strict=True):
        pool.commit(b, h)
    pool.free([2])
    pool.free([0])
    pool.free([1])
    (b,), hit = pool.allocate([], 1, use_cache=True)
    assert (b, hit) == (2, 0)
    assert pool.match([12]) == [] and pool.match([10]) == [0] and pool.match([11]) == [1]


def test_recommitting_a_block_drops_its_old_content():
    pool = BlockPool(2)
    (b,), _ = pool.allocate([], 1, use_cache=True)
    pool.commit(b, 10)
    pool.commit(b, 20)
    assert pool.match([10]) == []
    assert pool.match([20]) == [b]


def test_content_already_cached_elsewhere_keeps_its_first_block():
    pool = BlockPool(2)
    a, c = pool.allocate([], 2, use_cache=True)[0]
    pool.commit(a, 10)
    pool.commit(c, 10)
    assert pool.match([10]) == [a]
    # Reusing c (which never became the cached holder of 10) must not drop a's entry.
    pool.free([c])
    pool.allocate([], 1, use_cache=False)
    assert pool.match([10]) == [a]


class _OrderedPool:
    """The pool as first written: free blocks in an OrderedDict."""

    def __init__(self, n):
        from collections import OrderedDict

        self.n, self.fresh, self.free = n, 0, OrderedDict()
        self.cached, self.hash_of, self.refs = {}, {}, {}

    def allocate(self, chain, num_blocks, use_cache):
        hit = []
        for h in chain if use_cache else []:
            if h not in self.cached:
                break
            hit.append(self.cached[h])
        hit = hit[:num_blocks]
        need = num_blocks - len(hit)
        for b in hit:
            self.free.pop(b, None)
            self.refs[b] = self.refs.get(b, 0) + 1
        fresh = list(range(self.fresh, self.fresh + min(need, self.n - self.fresh)))
        self.fresh += len(fresh)
        while len(fresh) < need:
            b, _ = self.free.popitem(last=False)
            h = self.hash_of.pop(b, None)
            if h is not None and self.cached.get(h) == b:
                del self.cached[h]
            fresh.append(b)
        for b in fresh:
            self.refs[b] = 1
        return hit + fresh, len(hit)

    def commit(self, block, h):
        if self.cached.get(h, block) != block:
            return
        old = self.hash_of.pop(block, None)
        if old is not None and self.cached.get(old) == block:
            del self.cached[old]
        self.cached[h] = block
        self.hash_of[block] = h

    def free_blocks(self, blocks):
        for b in blocks:
            self.refs[b] -= 1
            if not self.refs[b]:
                del self.refs[b]
                self.free[b] = None


@pytest.mark.parametrize("seed", range(30))
def test_the_pool_hands_out_what_an_ordered_free_list_would(seed):
    """Random requests over shared prefixes (cache hits take free blocks from the
    middle of the free list, and a block may be freed again later)."""
    import random

    rng = random.Random(seed)
    n = 64
    pool, ref = BlockPool(n), _OrderedPool(n)
    held = []
    for _ in range(1500):  # enough to drop read entries from the free list's front
        if held and (rng.random() < 0.45 or pool.num_free < 12):
            blocks = held.pop(rng.randrange(len(held)))
            pool.free(blocks)
            ref.free_blocks(blocks)
        else:
            size = rng.randint(1, 8)
            chain = [rng.randrange(6) * 100 + i for i in range(size)]
            use = rng.random() < 0.8
            if not pool.can_allocate(size):
                continue
            got = pool.allocate(chain, size, use)
            assert got == ref.allocate(chain, size, use)
            for b, h in zip(got[0], chain, strict=True):
                if rng.random() < 0.7:
                    pool.commit(b, h)
                    ref.commit(b, h)
            held.append(got[0])
        assert pool.num_free == n - ref.fresh + len(ref.free)
        assert pool.num_held == len(ref.refs)


@pytest.mark.parametrize("seed", range(20))
def test_the_uncached_pool_hands_out_what_the_pool_does_without_its_cache(seed):
    """Same blocks in the same order, request by request, so a run's pages (and a
    fault's stale pages) are the same whichever pool the engine took."""
    import random

    rng = random.Random(seed)
    n = 64
    pool, plain = BlockPool(n), UncachedBlockPool(n)
    held = []
    for _ in range(1500):
        if held and (rng.random() < 0.45 or pool.num_free < 12):
            blocks = held.pop(rng.randrange(len(held)))
            pool.free(blocks)
            plain.free(blocks)
        else:
            size = rng.randint(0, 12)
            assert plain.can_allocate(size) == pool.can_allocate(size)
            if not pool.can_allocate(size):
                with pytest.raises(OutOfBlocks):
                    plain.allocate([], size, False)
                continue
            got = plain.allocate([], size, False)
            assert got == pool.allocate([7] * size, size, False)
            held.append(got[0])
        assert plain.num_free == pool.num_free and plain.num_held == pool.num_held


def test_the_uncached_pool_keeps_no_cache():
    plain = UncachedBlockPool(4)
    with pytest.raises(ValueError, match="no prefix cache"):
        plain.allocate([1, 2], 2, use_cache=True)
    blocks, cached = plain.allocate([1, 2], 2, use_cache=False)
    plain.commit(blocks[0], 1)
    assert cached == 0 and plain.match([1, 2]) == []
    with pytest.raises(ValueError, match="3 blocks freed, 2 held"):
        plain.free([0, 1, 2])


def test_an_engine_without_a_prefix_cache_takes_the_uncached_pool():
    from kvfault.fakes.sim import SimWorld
    from kvfault.reference import EngineConfig

    world = SimWorld()
    assert isinstance(world.engine(EngineConfig()).scheduler.pool, BlockPool)
    for config in (EngineConfig(model_kind="hybrid"), EngineConfig(prefix_caching=False)):
        assert isinstance(world.engine(config).scheduler.pool, UncachedBlockPool)
