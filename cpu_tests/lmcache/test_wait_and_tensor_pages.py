"""``LMCacheTier.wait`` (blocks until the reply; on timeout returns None without
spinning and leaves the ticket usable) and tensor pages (byte-exact round trips; the
recycled buffers behind retrieved pages are never reused while a page is alive)."""

from __future__ import annotations

import gc
import random
from typing import Any, Callable

import pytest
from lmc_util import GEOMETRY, SAFETY_NET_S

from kvfault.faults.lmcache import LMCacheServer
from kvfault.reference import OperationId, OpKind
from kvfault.reference.tiers.lmcache_pages import CopyThreads

CS, BS = GEOMETRY.chunk_size, GEOMETRY.block_size
_ops = iter(range(1, 10**9))


def op(kind: OpKind = OpKind.SAVE) -> OperationId:
    return OperationId("wait", next(_ops), kind)


def rand_ids(seed: int, n: int) -> tuple[int, ...]:
    rng = random.Random(f"ids-{seed}")
    return tuple(rng.randrange(2**32) for _ in range(n))


def fingerprints(seed: int, n: int) -> list[int]:
    rng = random.Random(f"pages-{seed}")
    return [rng.randrange(2**63) for _ in range(n)]


def own_tier(server: LMCacheServer, make_tier: Callable[..., Any], **kw: Any) -> Any:
    """A tier in this module's own namespace: the session's server is shared, and
    another module's prompts must never already be held."""
    return make_tier(server.url, model_name="test-wait", **kw)


def tensor_pages(tier: Any, seed: int, n_blocks: int) -> list[Any]:
    """Random 16-bit words (NaN and subnormal bit patterns included) as bf16 pages."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    shape = tier.block_shape()
    words = [torch.randint(-(2**15), 2**15, shape, dtype=torch.int16, generator=gen)
             for _ in range(n_blocks)]  # fmt: skip
    return [w.view(torch.bfloat16) for w in words]


def same_bytes(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_wait_returns_the_reply(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    tier = own_tier(lmcache_server, make_tier)
    ids = rand_ids(1, 2 * CS)
    fps = fingerprints(1, 2 * CS // BS)
    ticket = tier.submit_store(op(), ids, 0, 2 * CS, fps, [])
    reply = tier.wait(ticket, SAFETY_NET_S)
    assert reply is not None and reply.ok, reply
    assert reply is ticket.reply and tier.poll(ticket) is reply
    ticket = tier.submit_retrieve(op(OpKind.LOAD), ids, 0, 2 * CS, None)
    reply = tier.wait(ticket, SAFETY_NET_S)
    assert reply is not None and reply.ok, reply
    assert reply.pages == fps
    assert tier.wait(ticket, 0) is reply  # a terminal ticket answers at once


def test_wait_times_out_without_spinning(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any], monkeypatch: Any
) -> None:
    """An id outside u32 makes the server's lookup handler raise and never reply: the
    wait gives up after its timeout with None, having advanced the ticket once per
    wake-up (a spinning wait advances it thousands of times), and the ticket stays
    pending and usable."""
    tier = own_tier(lmcache_server, make_tier)
    ids = (2**32,) + rand_ids(2, CS - 1)
    ticket = tier.submit_retrieve(op(OpKind.LOAD), ids, 0, CS, None)
    advances = 0
    advance = type(tier)._advance

    def counting(self: Any, t: Any) -> None:
        nonlocal advances
        advances += 1
        advance(self, t)

    monkeypatch.setattr(type(tier), "_advance", counting)
    assert tier.wait(ticket, 0.5) is None
    assert advances <= 2, f"the wait advanced the ticket {advances} times: it spins"
    assert ticket.reply is None and ticket.stage.startswith("lookup"), ticket.stage
    assert tier.poll(ticket) is None
    assert tier.wait(ticket, 0) is None


def test_wait_returns_once_a_paused_server_answers(
    fresh_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    """A timed-out wait leaves the ticket valid: once the server runs again, the next
    wait returns the reply."""
    tier = make_tier(fresh_server.url)
    ids = rand_ids(3, CS)
    fps = fingerprints(3, CS // BS)
    fresh_server.pause()
    try:
        ticket = tier.submit_store(op(), ids, 0, CS, fps, [])
        assert tier.wait(ticket, 0.3) is None
    finally:
        fresh_server.resume()
    reply = tier.wait(ticket, SAFETY_NET_S)
    assert reply is not None and reply.ok, reply
    reply = tier.wait(tier.submit_retrieve(op(OpKind.LOAD), ids, 0, CS, None), SAFETY_NET_S)
    assert reply is not None and reply.ok and reply.pages == fps, reply


@pytest.mark.parametrize("copy_threads", [1, 3])
def test_tensor_pages_round_trip_byte_exact(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any], copy_threads: int
) -> None:
    """Whole chunks and a range ending inside a chunk (the tail blocks of the last
    chunk are not returned); every page is contiguous, of the block shape. Stores
    copied by one thread, and split unevenly over three."""
    tier = own_tier(lmcache_server, make_tier, page_format="tensor")
    tier._copy_threads.close()
    tier._copy_threads = CopyThreads(copy_threads)
    ids = rand_ids(40 + copy_threads, 3 * CS)  # each parametrization its own prompt
    pages = tensor_pages(tier, 4, 3 * CS // BS)
    reply = tier.wait(tier.submit_store(op(), ids, 0, 3 * CS, pages, []), SAFETY_NET_S)
    assert reply is not None and reply.ok, reply
    for start, end in ((0, 3 * CS), (CS, 2 * CS + 5 * BS), (2 * CS, 2 * CS + BS)):
        ticket = tier.submit_retrieve(op(OpKind.LOAD), ids, start, end, None)
        reply = tier.wait(ticket, SAFETY_NET_S)
        assert reply is not None and reply.ok, reply
        want = pages[start // BS : end // BS]
        assert len(reply.pages) == len(want)
        assert all(p.is_contiguous() for p in reply.pages)
        assert all(same_bytes(a, b) for a, b in zip(reply.pages, want, strict=True))


def test_retrieved_pages_survive_later_retrieves(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    """Pages are views of recycled buffers: a buffer goes back for reuse only when no
    tensor uses its memory, so a page (or a view of it) kept while later retrieves of
    other data run keeps its bytes; once everything is dropped, buffers are reused."""
    import torch

    tier = own_tier(lmcache_server, make_tier, page_format="tensor")
    a_ids, b_ids = rand_ids(5, CS), rand_ids(6, CS)
    a_pages, b_pages = tensor_pages(tier, 5, CS // BS), tensor_pages(tier, 6, CS // BS)
    for ids, pages in ((a_ids, a_pages), (b_ids, b_pages)):
        reply = tier.wait(tier.submit_store(op(), ids, 0, CS, pages, []), SAFETY_NET_S)
        assert reply is not None and reply.ok, reply
    reply = tier.wait(tier.submit_retrieve(op(OpKind.LOAD), a_ids, 0, CS, None), SAFETY_NET_S)
    assert reply is not None and reply.ok, reply
    kept = reply.pages[3].view(torch.int16)[1]  # a view of one page; the rest is dropped
    del reply
    gc.collect()
    for _ in range(4):
        got = tier.wait(tier.submit_retrieve(op(OpKind.LOAD), b_ids, 0, CS, None), SAFETY_NET_S)
        assert got is not None and got.ok, got
        assert all(same_bytes(x, y) for x, y in zip(got.pages, b_pages, strict=True))
        del got
        gc.collect()
    assert torch.equal(kept, a_pages[3].view(torch.int16)[1]), "a live page was overwritten"
    recycled = tier._recycler._free
    assert recycled, "dropped pages' buffers were not recycled"
    del kept
    gc.collect()
    assert len(tier._recycler._free) == 2  # A's buffer is back too, only now


def test_store_with_too_few_pages_fails(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    """Pages that do not cover every chunk of the range fail the store (never a chunk
    committed with blocks nobody wrote), in both page formats."""
    short = 2 * CS // BS - 1
    for seed, page_format in enumerate(("fingerprint", "tensor")):
        ids = rand_ids(70 + seed, 2 * CS)
        tier = own_tier(lmcache_server, make_tier, page_format=page_format)
        pages: list[Any] = (
            tensor_pages(tier, 7, short) if page_format == "tensor" else fingerprints(7, short)
        )
        reply = tier.wait(tier.submit_store(op(), ids, 0, 2 * CS, pages, []), SAFETY_NET_S)
        assert reply is not None and not reply.ok, (page_format, reply)
        assert "do not cover" in reply.error, reply.error
