"""MemoryTier options that make it behave like the real lmcache server, from the real
tier's findings (docs/lmcache_tier.md, "Where the real tier differs"): lookups with ids
outside ``[0, 2**32)`` are misses, empty ranges are answered at once, and a full tier
refuses new chunks while a background evictor frees LRU batches above a watermark."""

from __future__ import annotations

import pytest

from kvfault.fakes import MemoryTier, VirtualClock
from kvfault.reference import Geometry, OperationId, OpKind
from kvfault.reference.interfaces import LookupQuery

GEO = Geometry(16, 64, 256, 256)  # 4 blocks per chunk
CS = GEO.chunk_size
IDS = tuple(range(500, 500 + 300))


def sop(n: int = 1) -> OperationId:
    return OperationId("s", n, OpKind.SAVE)


def lop(n: int = 1) -> OperationId:
    return OperationId("l", n)


def pages(start: int, end: int, base: int = 0) -> list[int]:
    return [base + b for b in range(start // 16, end // 16)]


def prompt(i: int, chunks: int = 1) -> tuple[int, ...]:
    """A prompt sharing no chunk with any other ``i``."""
    return tuple(range(10_000 * (i + 1), 10_000 * (i + 1) + chunks * CS))


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def settle(tier: MemoryTier, clock: VirtualClock, ticket: object, dt: float = 0.01):
    clock.sleep(dt)
    reply = tier.poll(ticket)
    assert reply is not None
    return reply


def store(tier: MemoryTier, clock: VirtualClock, ids: tuple[int, ...], n: int = 1):
    return settle(tier, clock, tier.submit_store(sop(n), ids, 0, len(ids), pages(0, len(ids)), []))


def held(tier: MemoryTier, ids: tuple[int, ...]) -> bool:
    return tier.lookup(LookupQuery(ids)).kv_hit == len(ids)


# -- (a) ids outside [0, 2**32) --------------------------------------------------------


@pytest.mark.parametrize("bad", [2**32, 2**40, -1])
def test_lookup_with_ids_outside_u32_is_a_miss(clock: VirtualClock, bad: int) -> None:
    tier = MemoryTier(clock, GEO, state_grid="chunk", miss_on_bad_ids=True)
    store(tier, clock, IDS[:CS])
    ids = (bad,) + IDS[1:CS]
    result = tier.lookup(LookupQuery(ids))  # no OverflowError
    assert result.kv_hit == 0
    assert tier.unkeyable_lookups == 1
    assert held(tier, IDS[:CS])  # a good lookup is unaffected and not counted
    assert tier.unkeyable_lookups == 1


def test_lookup_with_bad_ids_still_reports_held_state_images(clock: VirtualClock) -> None:
    # The real tier's KV lookup gets no answer, its state lookups (own ids) do.
    tier = MemoryTier(clock, GEO, state_grid="chunk", miss_on_bad_ids=True)
    ticket = tier.submit_store(sop(), IDS[:CS], 0, CS, pages(0, CS), [(CS, 77, "st")])
    settle(tier, clock, ticket)
    result = tier.lookup(LookupQuery((2**32,) + IDS[1:CS], ((CS, 77),)))
    assert result.kv_hit == 0 and result.state_positions == (CS,)


def test_an_out_of_range_id_in_the_partial_tail_is_not_keyed(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, miss_on_bad_ids=True)
    store(tier, clock, IDS[:CS])
    assert tier.lookup(LookupQuery(IDS[:CS] + (2**32,))).kv_hit == CS
    assert tier.unkeyable_lookups == 0


def test_by_default_a_bad_id_lookup_raises(clock: VirtualClock) -> None:
    # The lookup channel answers "malformed lookup frame" from this error.
    tier = MemoryTier(clock, GEO)
    with pytest.raises(OverflowError):
        tier.lookup(LookupQuery((2**32,) + IDS[1:CS]))


# -- (b) empty ranges -----------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(64, 64), (128, 64), (16, 0)])
def test_an_empty_retrieve_answers_ok_with_no_pages(
    clock: VirtualClock, start: int, end: int
) -> None:
    tier = MemoryTier(clock, GEO, answer_empty_ranges=True)
    reply = tier.poll(tier.submit_retrieve(lop(), IDS, start, end, None))
    assert reply is not None  # at once: nothing to transfer
    assert reply.ok and reply.pages == [] and reply.state is None


def test_an_empty_store_answers_ok_and_keeps_its_on_grid_state(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, state_grid="chunk", answer_empty_ranges=True)
    reply = tier.poll(tier.submit_store(sop(), IDS, 128, 64, [], [(CS, 5, "st"), (16, 6, "x")]))
    assert reply is not None and reply.ok
    assert tier.num_chunks == 0
    assert tier.lookup(LookupQuery(IDS, ((CS, 5), (16, 6)))).state_positions == (CS,)


def test_empty_ranges_stay_unanswered_by_default(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO)
    ticket = tier.submit_retrieve(lop(), IDS, 128, 64, None)
    clock.sleep(1e6)
    assert tier.poll(ticket) is None


# -- (c) a full tier refuses, a background evictor frees LRU batches --------------------


def test_refuse_when_full_needs_a_capacity(clock: VirtualClock) -> None:
    with pytest.raises(ValueError, match="capacity"):
        MemoryTier(clock, GEO, refuse_when_full=True)
    with pytest.raises(ValueError, match="watermark"):
        MemoryTier(clock, GEO, capacity_chunks=4, refuse_when_full=True, evict_watermark=0)
    with pytest.raises(ValueError, match="ratio"):
        MemoryTier(clock, GEO, capacity_chunks=4, refuse_when_full=True, evict_ratio=1.5)
    with pytest.raises(ValueError, match="interval"):
        MemoryTier(clock, GEO, capacity_chunks=4, refuse_when_full=True, evict_interval_s=0)


def test_a_store_that_does_not_fit_is_not_kept(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=10, refuse_when_full=True)
    for i in range(10):
        assert store(tier, clock, prompt(i)).ok
    reply = store(tier, clock, prompt(10))
    assert not reply.ok and reply.error.startswith("store not kept")
    assert not held(tier, prompt(10))
    assert all(held(tier, prompt(i)) for i in range(10))  # nothing evicted at once
    assert tier.refused_chunks == 1 and tier.evicted_chunks == 0


def test_a_store_keeps_the_chunks_that_fit_and_fails(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=10, refuse_when_full=True)
    for i in range(8):
        store(tier, clock, prompt(i))
    ids = prompt(8, chunks=3)
    reply = store(tier, clock, ids)
    assert not reply.ok and "1 chunks" in reply.error
    assert tier.lookup(LookupQuery(ids)).kv_hit == 2 * CS  # the prefix that fit is held


def test_chunks_already_held_need_no_room(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=4, refuse_when_full=True)
    for i in range(4):
        store(tier, clock, prompt(i))
    assert store(tier, clock, prompt(2)).ok  # already held: "nothing to write" is fine


def test_the_evictor_frees_lru_batches_above_the_watermark(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=10, refuse_when_full=True, latency_s=1e-3)
    for i in range(10):
        store(tier, clock, prompt(i), n=i)
    assert held(tier, prompt(0))  # a lookup touches the LRU order: 0 is the newest now
    clock.sleep(1.0)  # the evictor's first tick: usage 10/10 >= 0.8 -> drop int(10*0.2)=2
    tier.lookup(LookupQuery(()))
    assert tier.evicted_chunks == 2 and tier.num_chunks == 8
    assert not held(tier, prompt(1)) and not held(tier, prompt(2))  # the least recent
    assert all(held(tier, prompt(i)) for i in (0, 3, 4, 5, 6, 7, 8, 9))
    clock.sleep(1.0)  # 8/10 is still at the watermark: another batch, int(8*0.2)=1
    tier.lookup(LookupQuery(()))
    assert tier.num_chunks == 7
    clock.sleep(5.0)  # 7/10 < 0.8: nothing more, however long
    tier.lookup(LookupQuery(()))
    assert tier.num_chunks == 7 and tier.evicted_chunks == 3


def test_eviction_is_asynchronous_not_at_the_store(clock: VirtualClock) -> None:
    # Survivors are not "the newest" (as in the real 24 MiB-pool test): stores refused
    # while full are lost even though the evictor later makes room for newer ones.
    tier = MemoryTier(clock, GEO, capacity_chunks=10, refuse_when_full=True)
    for i in range(10):
        store(tier, clock, prompt(i))
    refused = [i for i in range(10, 13) if not store(tier, clock, prompt(i)).ok]
    assert refused == [10, 11, 12]
    clock.sleep(1.0)
    tier.poll(tier.submit_retrieve(lop(), prompt(9), 0, CS, None))  # any call ticks
    assert store(tier, clock, prompt(13)).ok
    assert held(tier, prompt(13)) and not any(held(tier, prompt(i)) for i in refused)
    assert not held(tier, prompt(0)) and held(tier, prompt(9))


def test_a_long_quiet_gap_runs_each_due_tick_only_while_it_matters(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=10, refuse_when_full=True)
    for i in range(10):
        store(tier, clock, prompt(i))
    clock.sleep(1e9)  # a billion due ticks: two evict (10 -> 8 -> 7), the rest skip
    tier.lookup(LookupQuery(()))
    assert tier.num_chunks == 7


def test_default_capacity_still_evicts_the_oldest_at_once(clock: VirtualClock) -> None:
    tier = MemoryTier(clock, GEO, capacity_chunks=4)
    for i in range(5):
        assert store(tier, clock, prompt(i)).ok
    assert tier.num_chunks == 4 and not held(tier, prompt(0)) and held(tier, prompt(4))
