"""Real lmcache behaviours the stack must expect, each shown on the real server, and
the stack (``RestoreWorker``) turning each unanswered retrieve into a named stop
(``TransferUnprovable``) within its deadline, never a hang.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import pytest
from lmc_util import GEOMETRY, SAFETY_NET_S, wait_reply

from kvfault.faults.lmcache import LMCacheServer, WireFault, WireProxy
from kvfault.reference import LoadOp, OperationId, OpKind
from kvfault.reference.interfaces import LookupQuery

CS, BS = GEOMETRY.chunk_size, GEOMETRY.block_size
NO_REPLY_S = 2.0  # how long "never replies" is watched (the reply normally takes ms)


def rand_ids(seed: int, n: int = CS) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(2**32) for _ in range(n))


def pages(seed: int, n_tokens: int = CS) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(2**63) for _ in range(n_tokens // BS)]


def key(tier: Any, ids: tuple[int, ...], start: int, end: int, rid: str, readers: int = 1,
        worker: int | None = None) -> Any:  # fmt: skip
    from lmcache.v1.multiprocess.custom_types import IPCCacheServerKey

    return IPCCacheServerKey(
        model_name=tier.model_name, world_size=1, worker_id=worker, token_ids=ids,
        start=start, end=end, request_id=rid, num_kv_readers=readers,
    )  # fmt: skip


def stored(tier: Any, ids: tuple[int, ...], seed: int) -> None:
    ticket = tier.submit_store(OperationId("seed", seed, OpKind.SAVE), ids, 0, len(ids),
                               pages(seed, len(ids)), [])  # fmt: skip
    reply = wait_reply(tier, ticket)
    assert reply is not None and reply.ok, reply


# -- the behaviours, on lmcache's own client -----------------------------------------------
def test_store_ack_then_visibility(lmcache_tier: Any) -> None:
    """A store's True may come before lookups see the data. In engine-driven SHM mode
    (the one this tier uses) lmcache admits the chunk before it replies, so here the
    lag is measured, not assumed: the test records how many first lookups right after
    the ack missed and asserts every store becomes visible within the safety net."""
    tier = lmcache_tier
    misses, lags = 0, []
    for trial in range(20):
        ids = rand_ids(1000 + trial)
        stored(tier, ids, 1000 + trial)
        t0 = time.monotonic()
        if tier.lookup(LookupQuery(ids)).kv_hit < CS:
            misses += 1
        while tier.lookup(LookupQuery(ids)).kv_hit < CS:
            assert time.monotonic() - t0 < SAFETY_NET_S, "store acked but never visible"
            time.sleep(0.001)
        lags.append(time.monotonic() - t0)
    print(f"first lookup after ack missed {misses}/20; max lag {max(lags) * 1e3:.1f} ms")


@pytest.mark.parametrize("case", ["id_out_of_u32", "start_off_grid", "num_kv_readers_0"])
def test_raising_handler_never_replies(lmcache_tier: Any, case: str) -> None:
    tier = lmcache_tier
    ids = rand_ids(7)
    stored(tier, ids, 7)
    client = tier.client
    if case == "id_out_of_u32":
        fut = client.lookup(key(tier, (2**32,) + ids[1:], 0, CS, "bad-id"), 1)
    elif case == "start_off_grid":
        fut = client.prepare_retrieve(key(tier, ids, BS, CS, "bad-start", worker=0),
                                      tier._kv_iid)  # fmt: skip
    else:
        fut = client.lookup(key(tier, ids, 0, CS, "no-readers", readers=0), 1)
    assert not fut.wait(NO_REPLY_S), f"{case}: the server replied {fut.result(0)!r}"
    # The server itself survives the raising handler and answers the next request.
    assert client.noop().result(timeout=SAFETY_NET_S) is not None
    assert tier.lookup(LookupQuery(ids)).kv_hit == CS


def test_killed_server_inflight_futures_never_answered(
    fresh_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    tier = make_tier(fresh_server.url)
    ids = rand_ids(11)
    stored(tier, ids, 11)
    fresh_server.pause()  # so the request is surely in flight when the server dies
    fut = tier.client.lookup(key(tier, ids, 0, CS, "doomed"), 1)
    ticket = tier.submit_retrieve(OperationId("doomed", 1), ids, 0, CS, None)
    time.sleep(0.2)
    fresh_server.kill()
    assert not fut.wait(NO_REPLY_S)
    assert wait_reply(tier, ticket, NO_REPLY_S) is None
    assert ticket.stage.startswith("lookup")
    assert tier.lookup(LookupQuery(ids)).kv_hit == 0  # a dead server's lookup is a miss
    assert tier.lookup_timeouts >= 1


# -- the stack: a named stop within the deadline -------------------------------------------
def run_worker_until_stop(tier: Any, ids: tuple[int, ...], start: int, end: int,
                          deadline_s: float = 1.5) -> tuple[Any, float]:  # fmt: skip
    """Drive a RestoreWorker with one load in real time; return (error, seconds)."""
    from kvfault.fakes import SimCopyEngine, SimKvPages
    from kvfault.reference import Trace, TransferUnprovable
    from kvfault.reference.clock import RealClock
    from kvfault.reference.rules import RestoreDeadline
    from kvfault.reference.stack import QueueChannel, RestoreWorker

    clock = RealClock()
    kv = SimKvPages(64)
    worker = RestoreWorker(clock, tier, SimCopyEngine(clock, kv), kv, QueueChannel(),
                           Trace(clock.now), deadline=RestoreDeadline(deadline_s))  # fmt: skip
    load_op = OperationId("victim", 42)
    blocks = tuple(range((end - start) // BS))
    worker.start_load([LoadOp(load_op, ids, end, end, blocks, start=start)])
    t0 = time.monotonic()
    while time.monotonic() - t0 < SAFETY_NET_S:
        try:
            done = worker.get_finished()
        except TransferUnprovable as stop:
            assert stop.op == load_op and stop.phase == "retrieve"
            return stop, time.monotonic() - t0
        assert not done, f"the load finished instead of stopping: {done}"
        time.sleep(0.01)
    raise AssertionError("hang: no stop within the safety net")


@pytest.mark.parametrize("case", ["id_out_of_u32", "start_off_grid"])
def test_stack_stops_on_raising_handler(lmcache_tier: Any, case: str) -> None:
    ids = rand_ids(21, 2 * CS)
    stored(lmcache_tier, ids, 21)
    if case == "id_out_of_u32":
        stop, took = run_worker_until_stop(lmcache_tier, (2**32 + 1,) + ids[1:], 0, CS)
    else:
        stop, took = run_worker_until_stop(lmcache_tier, ids, BS, CS)
    assert "victim#42" in str(stop) and "retrieve" in str(stop)
    print(f"{case}: {stop} after {took:.2f}s")


def test_stack_stops_when_server_killed(
    fresh_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    tier = make_tier(fresh_server.url, lookup_timeout_s=1.0)
    ids = rand_ids(31)
    stored(tier, ids, 31)
    fresh_server.kill()
    stop, took = run_worker_until_stop(tier, ids, 0, CS)
    assert stop.elapsed > 1.5
    print(f"killed server: {stop} after {took:.2f}s")


@pytest.mark.parametrize("rpc", ["lookup", "query_prefetch_status", "prepare_retrieve",
                                 "commit_retrieve"])  # fmt: skip
def test_stack_stops_when_reply_dropped(
    lmcache_server: LMCacheServer, make_tier: Callable[..., Any], rpc: str
) -> None:
    ids = rand_ids(41, CS)
    direct = make_tier(lmcache_server.url)
    stored(direct, ids, 41)
    with WireProxy(lmcache_server.url, [WireFault("drop", op=rpc)], seed=1) as proxy:
        tier = make_tier(proxy.url)
        stop, took = run_worker_until_stop(tier, ids, 0, CS)
        assert proxy.fired and all(f.op == rpc and f.action == "drop" for f in proxy.fired)
    print(f"dropped {rpc}: {stop} after {took:.2f}s")


def test_stack_stops_while_server_paused_and_recovers_after(
    fresh_server: LMCacheServer, make_tier: Callable[..., Any]
) -> None:
    tier = make_tier(fresh_server.url)
    ids = rand_ids(51)
    stored(tier, ids, 51)
    fresh_server.pause()
    try:
        stop, _ = run_worker_until_stop(tier, ids, 0, CS)
        assert stop.phase == "retrieve"
    finally:
        fresh_server.resume()
    reply = wait_reply(tier, tier.submit_retrieve(OperationId("after", 1), ids, 0, CS, None))
    assert reply is not None and reply.ok and reply.pages == pages(51)
