"""The HBM block pool: reuse order, the prefix cache, counts."""

from __future__ import annotations

import pytest

from reference.stack.hbm import BlockPool, OutOfBlocks


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
