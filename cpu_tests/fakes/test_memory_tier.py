"""The in-process tier's LMCache semantics (docs/design.md#tiers, docs/design.md#fakes): prefix-chain keys,
contiguous-prefix lookup, asynchronous completion, the state grid, LRU capacity,
late visibility, and the requests the real server never answers."""

from __future__ import annotations

import pytest

from kvfault.fakes import MemoryTier, VirtualClock
from kvfault.reference import Geometry, OperationId, OpKind
from kvfault.reference.interfaces import LookupQuery
from kvfault.reference.rules import chunk_keys

GEO = Geometry(16, 64, 256, 256)  # 4 blocks per chunk
IDS = tuple(range(500, 500 + 300))


def sop(n=1):
    return OperationId("s", n, OpKind.SAVE)


def lop(n=1):
    return OperationId("l", n)


def pages(start, end, base=0):
    return [base + b for b in range(start // 16, end // 16)]


@pytest.fixture
def clock():
    return VirtualClock()


def settle(tier, clock, ticket, dt=1.0):
    clock.sleep(dt)
    reply = tier.poll(ticket)
    assert reply is not None
    return reply


def store(tier, clock, ids, start, end, states=(), base=0):
    return settle(
        tier, clock, tier.submit_store(sop(), ids, start, end, pages(start, end, base), states)
    )


def test_validation(clock):
    with pytest.raises(ValueError):
        MemoryTier(clock, GEO, "grid")
    with pytest.raises(ValueError):
        MemoryTier(clock, GEO, capacity_chunks=0)


def test_a_store_is_asynchronous_and_observed_only_by_poll(clock):
    tier = MemoryTier(clock, GEO, latency_s=0.5)
    ticket = tier.submit_store(sop(), IDS, 0, 128, pages(0, 128), [])
    assert tier.num_chunks == 0
    assert tier.poll(ticket) is None
    clock.sleep(0.4)
    assert tier.poll(ticket) is None
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 0
    clock.sleep(0.2)
    assert tier.poll(ticket).ok
    assert tier.poll(ticket).ok  # terminal stays terminal
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 128


def test_partial_chunks_are_neither_stored_nor_hit(clock):
    tier = MemoryTier(clock, GEO)
    assert store(tier, clock, IDS, 0, 300).ok  # 300 = 4 chunks + 44 tokens
    assert tier.num_chunks == 4
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 256
    assert tier.lookup(LookupQuery(IDS[:255])).kv_hit == 192


def test_lookup_is_the_contiguous_prefix(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256)
    assert tier.drop_chunk(IDS, 1)
    assert not tier.drop_chunk(IDS, 1)
    assert not tier.drop_chunk(IDS, 9)
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 64  # chunks 2 and 3 are not reachable


def test_keys_are_a_prefix_chain(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256)
    other = (IDS[0] + 1,) + IDS[1:]  # differs in the first id only
    assert tier.lookup(LookupQuery(other)).kv_hit == 0
    tail_changed = IDS[:200] + tuple(i + 1 for i in IDS[200:])
    assert tier.lookup(LookupQuery(tail_changed)).kv_hit == 192


def test_retrieve_returns_the_stored_pages(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256, base=1000)
    reply = settle(tier, clock, tier.submit_retrieve(lop(), IDS, 0, 256, None))
    assert reply.ok and reply.pages == pages(0, 256, 1000)
    # from a chunk-aligned start, to a block boundary inside a chunk
    reply = settle(tier, clock, tier.submit_retrieve(lop(), IDS, 64, 224, None))
    assert reply.ok and reply.pages == pages(64, 224, 1000)


def test_an_incremental_store_extends_the_prefix(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 128, base=0)
    store(tier, clock, IDS, 128, 256, base=0)
    reply = settle(tier, clock, tier.submit_retrieve(lop(), IDS, 0, 256, None))
    assert reply.ok and reply.pages == pages(0, 256)
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 256


def test_state_images_only_on_the_state_grid(clock):
    block = MemoryTier(clock, GEO, "block")
    mp = MemoryTier(clock, GEO, "chunk")
    states = [(48, 1, "s48"), (64, 2, "s64"), (200, 3, "s200"), (0, 4, "s0")]
    for t in (block, mp):
        store(t, clock, IDS, 0, 256, states)
    cands = ((48, 1), (64, 2), (200, 3), (0, 4), (128, 5))
    assert block.lookup(LookupQuery(IDS, cands)).state_positions == (48, 64)
    assert mp.lookup(LookupQuery(IDS, cands)).state_positions == (64,)  # 48 silently dropped
    assert block.on_state_grid(16) and not block.on_state_grid(8) and not block.on_state_grid(0)
    assert mp.on_state_grid(128) and not mp.on_state_grid(48)
    reply = settle(mp, clock, mp.submit_retrieve(lop(), IDS, 0, 64, 2))
    assert reply.state == "s64"
    reply = settle(mp, clock, mp.submit_retrieve(lop(), IDS, 0, 64, 1))
    assert not reply.ok and "state image" in reply.error


def test_capacity_evicts_least_recently_used(clock):
    tier = MemoryTier(clock, GEO, capacity_chunks=4)
    a, b = IDS[:128], tuple(range(9000, 9128))
    store(tier, clock, a, 0, 128)
    store(tier, clock, b, 0, 128)
    assert tier.lookup(LookupQuery(a)).kv_hit == 128  # a is used again: b is older now
    c = tuple(range(7000, 7128))
    store(tier, clock, c, 0, 128)
    assert tier.num_chunks == 4
    assert tier.lookup(LookupQuery(a)).kv_hit == 128
    assert tier.lookup(LookupQuery(c)).kv_hit == 128
    assert tier.lookup(LookupQuery(b)).kv_hit == 0


def test_an_eviction_between_lookup_and_retrieve_fails_the_retrieve(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256)
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 256
    ticket = tier.submit_retrieve(lop(), IDS, 0, 256, None)
    tier.drop_chunk(IDS, 2)  # data is read when the reply is first seen
    reply = settle(tier, clock, ticket)
    assert not reply.ok and "evicted" in reply.error


def test_a_range_past_the_keyed_prefix_fails(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256)
    reply = settle(tier, clock, tier.submit_retrieve(lop(), IDS[:100], 0, 128, None))
    assert not reply.ok and "not keyed" in reply.error


@pytest.mark.parametrize(
    "ids, start, end",
    [
        (IDS, 16, 128),  # start off the chunk grid
        ((2**32,) + IDS[1:], 0, 128),  # an id outside [0, 2**32)
        ((-1,) + IDS[1:], 0, 128),
        (IDS, 128, 64),  # end before start
    ],
)
def test_requests_the_real_server_never_answers(clock, ids, start, end):
    tier = MemoryTier(clock, GEO)
    r = tier.submit_retrieve(lop(), ids, start, end, None)
    s = tier.submit_store(sop(), ids, start, end, [], [])
    clock.sleep(1e6)
    assert tier.poll(r) is None and tier.poll(s) is None


def test_late_visibility(clock):
    tier = MemoryTier(clock, GEO, visibility_delay_s=0.005)
    ticket = tier.submit_store(sop(), IDS, 0, 128, pages(0, 128), [(64, 7, "st")])
    clock.sleep(0.01)
    assert tier.poll(ticket).ok  # acknowledged...
    q = LookupQuery(IDS, ((64, 7),))
    assert tier.lookup(q).kv_hit == 0 and tier.lookup(q).state_positions == ()  # ...not visible
    clock.sleep(0.005)
    assert tier.lookup(q).kv_hit == 128 and tier.lookup(q).state_positions == (64,)


def test_a_store_of_a_chunk_written_late_leaves_it_late(clock):
    """A store of chunks the tier already holds writes nothing, so chunks a late store
    put there stay invisible until their own time, however promptly a second store of
    the same content is acknowledged (the efficiency property models exactly this)."""
    tier = MemoryTier(clock, GEO, visibility_delay_s=5.0)
    late = tier.submit_store(sop(), IDS, 0, 128, pages(0, 128), [])
    clock.sleep(0.01)
    assert tier.poll(late).ok
    tier.visibility_delay_s = 0.0
    prompt = tier.submit_store(sop(2), IDS, 0, 128, pages(0, 128), [])
    clock.sleep(0.01)
    assert tier.poll(prompt).ok
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 0
    clock.sleep(5.0)
    assert tier.lookup(LookupQuery(IDS)).kv_hit == 128


def test_completion_time_grows_with_bytes(clock):
    tier = MemoryTier(clock, GEO, latency_s=0.01, bandwidth_bytes_s=1e6, page_bytes=1000)
    ticket = tier.submit_store(sop(), IDS, 0, 256, pages(0, 256), [])  # 16 pages: 16 ms
    clock.sleep(0.025)
    assert tier.poll(ticket) is None
    clock.sleep(0.002)
    assert tier.poll(ticket).ok


def test_tier_keys_are_the_reference_chunk_keys(clock):
    tier = MemoryTier(clock, GEO)
    store(tier, clock, IDS, 0, 256)
    assert list(tier._chunks) == chunk_keys(IDS[:256], 64)
