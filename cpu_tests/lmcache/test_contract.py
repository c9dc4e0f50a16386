"""One contract, two tiers: the in-process ``MemoryTier`` and the real lmcache tier.

Each test body runs against both. Where the real server behaves differently the test
says so in one place (``is_real``) and docs/lmcache_tier.md lists the difference.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Iterator

import pytest
from lmc_util import GEOMETRY, SAFETY_NET_S, wait_reply

from kvfault.reference import OperationId, OpKind, Request
from kvfault.reference.interfaces import LookupQuery
from kvfault.reference.rules import tier_token_ids

CS, BS = GEOMETRY.chunk_size, GEOMETRY.block_size
_gen = iter(range(1, 10**9))


def op(kind: OpKind = OpKind.SAVE) -> OperationId:
    return OperationId(f"req-{next(_gen)}", next(_gen), kind)


def rand_ids(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(2**32) for _ in range(n))


def fingerprints(rng: random.Random, n_tokens: int) -> list[int]:
    return [rng.randrange(-(2**63), 2**63) for _ in range(n_tokens // BS)]


@pytest.fixture(params=["memory", "lmcache"])
def tier(request: pytest.FixtureRequest, make_tier: Callable[..., Any]) -> Iterator[Any]:
    if request.param == "memory":
        from kvfault.fakes import MemoryTier
        from kvfault.reference.clock import RealClock

        yield MemoryTier(RealClock(), GEOMETRY, state_grid="chunk", latency_s=1e-4)
    else:
        server = request.getfixturevalue("lmcache_server")
        yield make_tier(server.url)


def is_real(tier: Any) -> bool:
    return type(tier).__name__ == "LMCacheTier"


def store(tier: Any, ids: tuple[int, ...], start: int, end: int, pages: list[Any],
          states: list[tuple[int, int, Any]] | None = None) -> Any:  # fmt: skip
    ticket = tier.submit_store(op(), ids, start, end, pages, states or [])
    reply = wait_reply(tier, ticket)
    assert reply is not None, "store never answered"
    return reply


def retrieve(tier: Any, ids: tuple[int, ...], start: int, end: int,
             state_key: int | None = None, limit_s: float = SAFETY_NET_S) -> Any:  # fmt: skip
    return wait_reply(tier, tier.submit_retrieve(op(OpKind.LOAD), ids, start, end, state_key),
                      limit_s)  # fmt: skip


def lookup_until(tier: Any, ids: tuple[int, ...], want: int) -> int:
    """Lookup until the hit reaches ``want`` (visibility may lag the ack), within the
    safety net; returns the last hit."""
    deadline = time.monotonic() + SAFETY_NET_S
    hit = tier.lookup(LookupQuery(ids)).kv_hit
    while hit < want and time.monotonic() < deadline:
        time.sleep(0.002)
        hit = tier.lookup(LookupQuery(ids)).kv_hit
    return hit


def test_geometry(tier: Any) -> None:
    assert tier.chunk_size == 256
    assert tier.block_size == 16
    assert tier.state_grid == "chunk"


def test_roundtrip_byte_exact_and_covering_chunk(tier: Any) -> None:
    rng = random.Random(1)
    ids = rand_ids(rng, 3 * CS)
    pages = fingerprints(rng, 3 * CS)
    assert store(tier, ids, 0, 3 * CS, pages).ok
    assert lookup_until(tier, ids, 3 * CS) == 3 * CS
    whole = retrieve(tier, ids, 0, 3 * CS)
    assert whole.ok and whole.pages == pages
    # A range that ends inside a chunk: the covering chunk moves, only its blocks return.
    mid = retrieve(tier, ids, CS, CS + 9 * BS)
    assert mid.ok and mid.pages == pages[CS // BS : CS // BS + 9]


def test_contiguous_prefix_hits(tier: Any) -> None:
    rng = random.Random(2)
    ids = rand_ids(rng, 2 * CS + 40)
    pages = fingerprints(rng, 2 * CS)
    assert store(tier, ids, 0, 2 * CS, pages).ok
    assert lookup_until(tier, ids, 2 * CS) == 2 * CS
    # Same first chunk, different second: only the shared prefix hits.
    other = ids[:CS] + rand_ids(rng, CS)
    assert tier.lookup(LookupQuery(other)).kv_hit == CS
    # First id differs: the prefix chain differs from chunk 0 on.
    assert tier.lookup(LookupQuery((ids[0] ^ 1,) + ids[1:])).kv_hit == 0
    # Only chunk 1 of a fresh prompt stored: no hit without chunk 0.
    fresh = rand_ids(rng, 2 * CS)
    assert store(tier, fresh, CS, 2 * CS, fingerprints(rng, CS)).ok
    time.sleep(0.05)
    assert tier.lookup(LookupQuery(fresh)).kv_hit == 0


def test_text_keys_are_prompt_ids_and_media_keys_differ(tier: Any) -> None:
    rng = random.Random(3)
    prompt = rand_ids(rng, CS)
    text = Request("text-1", prompt)
    picture = Request("pic-1", prompt, cache_seed=0x1234_5678_9ABC_DEF0)
    assert tier_token_ids(text) == prompt
    assert store(tier, tier_token_ids(text), 0, CS, fingerprints(rng, CS)).ok
    assert lookup_until(tier, prompt, CS) == CS
    assert tier.lookup(LookupQuery(tier_token_ids(picture))).kv_hit == 0


def test_partial_chunk_is_not_keyed(tier: Any) -> None:
    rng = random.Random(4)
    ids = rand_ids(rng, CS + 100)
    pages = fingerprints(rng, CS + 96)
    assert store(tier, ids, 0, CS + 96, pages).ok  # the tail is acknowledged, not kept
    assert lookup_until(tier, ids, CS) == CS
    time.sleep(0.05)
    assert tier.lookup(LookupQuery(ids)).kv_hit == CS
    tail = retrieve(tier, ids, 0, CS + 96)
    assert tail is not None and not tail.ok  # the range is not keyed
    head = retrieve(tier, ids, 0, CS)
    assert head.ok and head.pages == pages[: CS // BS]


def test_visible_after_store_ack(tier: Any) -> None:
    """Contract: once a store is acknowledged, lookups see it — possibly a little
    later (the real tier is allowed to lag; the test waits within a safety net and
    reports the lag it saw)."""
    rng = random.Random(5)
    ids = rand_ids(rng, CS)
    assert store(tier, ids, 0, CS, fingerprints(rng, CS)).ok
    t0 = time.monotonic()
    first = tier.lookup(LookupQuery(ids)).kv_hit
    assert lookup_until(tier, ids, CS) == CS
    print(f"first lookup after ack: {first}; visible after {time.monotonic() - t0:.4f}s")


def test_state_images_only_on_chunk_grid(tier: Any) -> None:
    rng = random.Random(6)
    ids = rand_ids(rng, 2 * CS)
    states = [(CS, 101, 7777), (CS + BS, 102, 8888), (2 * CS, 103, -5)]
    assert store(tier, ids, 0, 2 * CS, fingerprints(rng, 2 * CS), states).ok
    assert lookup_until(tier, ids, 2 * CS) == 2 * CS
    got = tier.lookup(LookupQuery(ids, ((CS, 101), (CS + BS, 102), (2 * CS, 103))))
    assert got.state_positions == (CS, 2 * CS)
    reply = retrieve(tier, ids, 0, CS, state_key=101)
    assert reply.ok and reply.state == 7777
    missing = retrieve(tier, ids, 0, CS, state_key=102)
    assert missing is not None and not missing.ok


def test_evicted_between_lookup_and_retrieve_fails_cleanly(tier: Any) -> None:
    rng = random.Random(7)
    ids = rand_ids(rng, 2 * CS)
    assert store(tier, ids, 0, 2 * CS, fingerprints(rng, 2 * CS)).ok
    assert lookup_until(tier, ids, 2 * CS) == 2 * CS
    if is_real(tier):
        tier.client.clear(True).result(timeout=SAFETY_NET_S)  # someone else evicts
    else:
        assert tier.drop_chunk(ids, 0)
    reply = retrieve(tier, ids, 0, 2 * CS)
    assert reply is not None and not reply.ok and reply.pages == []


def test_ids_outside_u32_never_answered(tier: Any) -> None:
    rng = random.Random(8)
    ids = (2**32 + 5,) + rand_ids(rng, CS - 1)
    assert retrieve(tier, ids, 0, CS, limit_s=1.0) is None
    ticket = tier.submit_store(op(), ids, 0, CS, fingerprints(rng, CS), [])
    assert wait_reply(tier, ticket, 1.0) is None


@pytest.fixture(params=["memory", "lmcache"])
def small_tier(request: pytest.FixtureRequest, make_tier: Callable[..., Any]) -> Iterator[Any]:
    """A tier that holds about a dozen chunks."""
    if request.param == "memory":
        from kvfault.fakes import MemoryTier
        from kvfault.reference.clock import RealClock

        yield MemoryTier(RealClock(), GEOMETRY, state_grid="chunk", capacity_chunks=12,
                         latency_s=1e-4)  # fmt: skip
        return
    from kvfault.faults.lmcache import LMCacheServer
    from kvfault.reference.tiers import KVLayout

    # 2 MiB chunks in a 24 MiB pool: about a dozen chunks before the watermark.
    with LMCacheServer(l1_size_gb=24 / 1024) as server:
        yield make_tier(server.url, layout=KVLayout(num_layers=4, num_heads=8, head_dim=64))


def test_eviction_bounded_capacity(small_tier: Any) -> None:
    """Both tiers stay within capacity and never acknowledge a chunk they do not hold.

    MemoryTier evicts the least recently used chunk at once, so the oldest prompt goes
    and the newest stays. The real server instead refuses new chunks while its pool is
    full (the tier reports "store not kept") and evicts asynchronously in batches once
    usage passes its watermark, so which prompts survive is not "the newest".
    """
    rng = random.Random(9)
    prompts = [rand_ids(rng, CS) for _ in range(30)]
    acked: list[bool] = []
    for ids in prompts:
        reply = store(small_tier, ids, 0, CS, fingerprints(rng, CS))
        if reply.ok:
            assert small_tier.lookup(LookupQuery(ids)).kv_hit == CS  # ok means held now
        else:
            assert is_real(small_tier) and "not kept" in reply.error, reply
        acked.append(reply.ok)
        time.sleep(0.01 if is_real(small_tier) else 0)
    held = [small_tier.lookup(LookupQuery(p)).kv_hit // CS for p in prompts]
    print("acked:", [int(a) for a in acked], "held now:", held)
    assert 0 < sum(held) <= 15
    assert sum(held) < len(prompts)
    if not is_real(small_tier):
        assert all(acked) and held[0] == 0 and held[-1] == 1
        assert held == [0] * 18 + [1] * 12
