"""The wire fault proxy between lmcache's client and the real server: each fault fires,
is recorded, and has the effect it names."""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import pytest
from lmc_util import GEOMETRY, SAFETY_NET_S, wait_reply

from kvfault.faults.lmcache import LMCacheServer, WireFault, WireProxy
from kvfault.reference import OperationId, OpKind
from kvfault.reference.interfaces import LookupQuery

CS, BS = GEOMETRY.chunk_size, GEOMETRY.block_size


def rand_ids(seed: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(2**32) for _ in range(CS))


def wait_until(cond: Callable[[], bool], limit_s: float = SAFETY_NET_S) -> bool:
    """Whether ``cond`` held within ``limit_s`` (a safety net, never a timing claim)."""
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def store_via(tier: Any, ids: tuple[int, ...], limit_s: float = SAFETY_NET_S) -> Any:
    rng = random.Random(ids[0])
    ticket = tier.submit_store(OperationId("w", ids[0], OpKind.SAVE), ids, 0, CS,
                               [rng.randrange(2**62) for _ in range(CS // BS)], [])  # fmt: skip
    return ticket, wait_reply(tier, ticket, limit_s)


def test_passthrough_records_traffic(lmcache_server: LMCacheServer,
                                     make_tier: Callable[..., Any]) -> None:  # fmt: skip
    with WireProxy(lmcache_server.url) as proxy:
        tier = make_tier(proxy.url)
        ids = rand_ids(1)
        _, reply = store_via(tier, ids)
        assert reply is not None and reply.ok
        assert tier.lookup(LookupQuery(ids)).kv_hit == CS
        assert proxy.fired == []
        assert proxy.requests["prepare_store"] == 1 and proxy.replies["commit_store"] == 1


def test_drop_chosen_reply_by_index(lmcache_server: LMCacheServer,
                                    make_tier: Callable[..., Any]) -> None:  # fmt: skip
    # The second commit_store reply (index 1) is dropped; the first and third pass.
    with WireProxy(lmcache_server.url, [WireFault("drop", op="commit_store", index=1)]) as p:
        tier = make_tier(p.url)
        first = store_via(tier, rand_ids(10))
        # The dropped one: no answer is ever coming, so wait for the drop itself (not
        # for a time a loaded machine may overrun), then see the ticket still pending.
        dropped = store_via(tier, rand_ids(11), limit_s=0.0)[0]
        early = []

        def dropped_yet() -> bool:
            reply = tier.poll(dropped)  # the ticket advances only when polled
            early.extend([reply] if reply is not None else [])
            return bool(early) or p.fired_actions() == ["drop"]

        assert wait_until(dropped_yet) and not early
        assert wait_reply(tier, dropped, 0.2) is None
        third = store_via(tier, rand_ids(12))
        assert [r is not None and r.ok for _, r in (first, third)] == [True, True]
        assert dropped.stage == "commit_store"  # pending on the dropped reply
        assert [(f.action, f.op, f.index) for f in p.fired] == [("drop", "commit_store", 1)]
        # The server did the work; only the answer was lost.
        assert tier.lookup(LookupQuery(rand_ids(11))).kv_hit == CS


def test_delay_reply(lmcache_server: LMCacheServer, make_tier: Callable[..., Any]) -> None:
    with WireProxy(lmcache_server.url,
                   [WireFault("delay", op="prepare_store", delay_s=0.6)]) as proxy:  # fmt: skip
        tier = make_tier(proxy.url)
        t0 = time.monotonic()
        ticket, reply = store_via(tier, rand_ids(20))
        took = time.monotonic() - t0
        assert reply is not None and reply.ok
        assert took >= 0.6  # a lower bound only: the reply cannot come before the delay
        assert [f.action for f in proxy.fired] == ["delay"]


def test_duplicate_reply_is_harmless(lmcache_server: LMCacheServer,
                                     make_tier: Callable[..., Any]) -> None:  # fmt: skip
    with WireProxy(lmcache_server.url, [WireFault("duplicate", op="commit_store")]) as p:
        tier = make_tier(p.url)
        for i in range(3):
            _, reply = store_via(tier, rand_ids(30 + i))
            assert reply is not None and reply.ok
        assert [f.action for f in p.fired] == ["duplicate"] * 3
        assert tier.lookup(LookupQuery(rand_ids(32))).kv_hit == CS
        assert tier.client.noop().result(timeout=SAFETY_NET_S) is not None


def test_probability_is_seeded(lmcache_server: LMCacheServer,
                               make_tier: Callable[..., Any]) -> None:  # fmt: skip
    def fired_for(seed: int) -> list[int]:
        fault = WireFault("delay", op="get_chunk_size", probability=0.5, delay_s=0.001)
        with WireProxy(lmcache_server.url, [fault], seed=seed) as proxy:
            tier = make_tier(proxy.url)
            for _ in range(20):
                tier.client.get_chunk_size().result(timeout=SAFETY_NET_S)
            return [f.index for f in proxy.fired]

    a, b, c = fired_for(5), fired_for(5), fired_for(6)
    assert a == b and a != c
    assert 0 < len(a) < 21


class SlowToKill:
    """The server, whose ``kill`` starts late: the proxy's thread descheduled between
    the fault and the signal, as on a loaded machine."""

    def __init__(self, server: LMCacheServer, late_s: float):
        self.server, self.late_s = server, late_s
        self.url = server.url

    def kill(self) -> None:
        time.sleep(self.late_s)
        self.server.kill()

    def pause(self) -> None:
        self.server.pause()

    def resume(self) -> None:
        self.server.resume()


@pytest.mark.parametrize("late_s", [0.0, 0.5])
def test_kill_server_on_request(fresh_server: LMCacheServer, make_tier: Callable[..., Any],
                                late_s: float) -> None:  # fmt: skip
    """The request the kill fires on is never answered, however late the signal lands
    (with 0.5 s, the proxy that forwarded first let ``prepare_store`` be answered and
    the store stuck one stage later, on ``commit_store``)."""
    fault = WireFault("kill", op="prepare_store", index=0)
    server = SlowToKill(fresh_server, late_s)
    with WireProxy(fresh_server.url, [fault], server=server) as proxy:
        tier = make_tier(proxy.url)
        ticket = store_via(tier, rand_ids(40), limit_s=0.0)[0]
        assert wait_until(lambda: not fresh_server.alive())
        assert wait_reply(tier, ticket, 0.2 + late_s) is None
        assert ticket.stage == "prepare_store"
        assert [f.action for f in proxy.fired] == ["kill"]


def test_pause_server_then_resume(fresh_server: LMCacheServer,
                                  make_tier: Callable[..., Any]) -> None:  # fmt: skip
    fault = WireFault("pause", op="prepare_store", index=0, delay_s=1.0)
    with WireProxy(fresh_server.url, [fault], server=fresh_server) as proxy:
        tier = make_tier(proxy.url)
        ticket = tier.submit_store(OperationId("p", 1, OpKind.SAVE), rand_ids(50), 0, CS,
                                   list(range(CS // BS)), [])  # fmt: skip
        assert wait_reply(tier, ticket, 0.5) is None  # paused: no answer yet
        reply = wait_reply(tier, ticket)  # SIGCONT after 1 s: the answer comes
        assert reply is not None and reply.ok
        assert [f.action for f in proxy.fired] == ["pause"]


def test_bad_faults_are_rejected(lmcache_server: LMCacheServer) -> None:
    with pytest.raises(ValueError, match="unknown wire fault action"):
        WireFault("explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay_s"):
        WireFault("delay", op="lookup")
    with pytest.raises(ValueError, match="server"):
        WireProxy(lmcache_server.url, [WireFault("kill")])
