"""Wire faults: injectors that put a ``WireProxy`` between a run's tier client and the
real lmcache server and drop, delay or duplicate chosen replies, or pause or kill the
server. Each fires once per fault the proxy applied, with the proxy's evidence.

``WIRE_FAULTS`` is their catalog: how to build each, the scenario it runs on, and how
the fixed stack must end (docs/design.md#faults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kvfault.faults.lmcache.server import LMCacheServer
from kvfault.faults.lmcache.wire_proxy import Action, FiredFault, WireFault, WireProxy
from kvfault.faults.runs import Expect, Injector, finishes, stops
from kvfault.reference.stack.engine import EngineConfig


class WireInjector(Injector):
    """Base of the wire faults: puts a ``WireProxy`` with ``faults(config)`` between
    each tier client of the run and the server, and fires once per fault the proxy
    applied (evidence: action, lmcache operation, its message index). Firings are
    reported on the engine's thread, at the tier's next call and at ``close``."""

    name = "wire"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.proxies: list[WireProxy] = []
        self._reported: dict[int, int] = {}  # proxy index -> firings reported

    def faults(self, config: EngineConfig) -> list[WireFault]:
        raise NotImplementedError

    def route(self, url: str, server: LMCacheServer, config: EngineConfig) -> str:
        """Start a proxy in front of ``url``; the tier connects to what this returns."""
        proxy = WireProxy(
            url, self.faults(config), seed=self.rng.getrandbits(32), server=server
        ).start()
        self.proxies.append(proxy)
        return proxy.url

    def drain(self) -> None:
        """Report (``fire``) every fault the proxies applied since the last drain."""
        for i, proxy in enumerate(self.proxies):
            fired: list[FiredFault] = list(proxy.fired)
            for f in fired[self._reported.get(i, 0) :]:
                self.fire(action=f.action, lmcache_op=f.op, message=f.index, fault=f.fault)
            self._reported[i] = len(fired)

    def wrap_tier(self, tier: Any) -> Any:
        return _Draining(tier, self)

    def close(self) -> None:
        self.drain()
        for proxy in self.proxies:
            proxy.stop()

    def describe(self) -> str:
        return self.name


class _Draining:
    """Forwards to the tier; reports its injector's new firings on every call."""

    def __init__(self, inner: Any, injector: WireInjector):
        self._inner = inner
        self._injector = injector

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def lookup(self, query: Any) -> Any:
        self._injector.drain()
        return self._inner.lookup(query)

    def submit_retrieve(self, *args: Any) -> Any:
        self._injector.drain()
        return self._inner.submit_retrieve(*args)

    def submit_store(self, *args: Any) -> Any:
        self._injector.drain()
        return self._inner.submit_store(*args)

    def poll(self, ticket: object) -> Any:
        self._injector.drain()
        return self._inner.poll(ticket)


class WireReplyFault(WireInjector):
    """Drop, delay or duplicate replies of lmcache operation ``op`` (``None``: any):
    the ``index``-th message of it (0-based, over the run; ``None``: every one), each
    with probability ``p`` (drawn from the run's seed). A delay is ``delay_deadlines``
    times the run's transfer deadline, so it means the same at every time scale."""

    def __init__(
        self,
        action: Action,
        *,
        op: str | None = "prepare_retrieve",
        index: int | None = 2,
        p: float = 1.0,
        delay_deadlines: float = 0.0,
        name: str | None = None,
        seed: int = 0,
    ):
        if name is not None:
            self.name = name
        super().__init__(seed)
        if action not in ("drop", "delay", "duplicate"):
            raise ValueError(f"a reply fault drops, delays or duplicates, got {action!r}")
        self.action, self.op, self.index, self.p = action, op, index, p
        self.delay_deadlines = delay_deadlines
        self.faults(EngineConfig())  # bad parameters show at construction

    def faults(self, config: EngineConfig) -> list[WireFault]:
        return [
            WireFault(
                self.action,
                op=self.op,
                index=self.index,
                probability=self.p,
                delay_s=self.delay_deadlines * config.transfer_deadline_s,
            )
        ]

    def describe(self) -> str:
        extra = f", delay={self.delay_deadlines:g}xD" if self.delay_deadlines else ""
        return f"{self.name}({self.action} {self.op or 'any'}#{self.index}, p={self.p:g}{extra})"


class WireServerFault(WireInjector):
    """Kill (SIGKILL) or pause (SIGSTOP) the server when the ``index``-th request of
    lmcache operation ``op`` arrives (it is in flight then). A pause lasts
    ``pause_deadlines`` times the run's transfer deadline, then SIGCONT."""

    def __init__(
        self,
        action: Action,
        *,
        op: str = "prepare_retrieve",
        index: int = 2,
        pause_deadlines: float = 0.5,
        name: str | None = None,
        seed: int = 0,
    ):
        if name is not None:
            self.name = name
        super().__init__(seed)
        if action not in ("kill", "pause"):
            raise ValueError(f"a server fault kills or pauses, got {action!r}")
        if action == "pause" and pause_deadlines <= 0:
            raise ValueError("a pause needs pause_deadlines > 0 (it must end)")
        self.action, self.op, self.index = action, op, index
        self.pause_deadlines = pause_deadlines

    def faults(self, config: EngineConfig) -> list[WireFault]:
        delay = self.pause_deadlines * config.transfer_deadline_s if self.action == "pause" else 0
        return [WireFault(self.action, op=self.op, index=self.index, delay_s=delay)]

    def describe(self) -> str:
        extra = f" for {self.pause_deadlines:g}xD" if self.action == "pause" else ""
        return f"{self.name}({self.action} at {self.op}#{self.index}{extra})"


# Expected endings of a wire fault on the fixed stack (``faults.runs.Expect``). A stop
# is TransferUnprovable naming any operation; when it comes is the properties' call
# (no_false_stop, liveness): a real tier's timing is judged by them, not by a bound.
STOP = stops("TransferUnprovable")
FINISH = finishes()  # no stop; every request answered
EITHER = finishes().otherwise(STOP)  # finish, or the named stop


@dataclass(frozen=True)
class WireFaultInfo:
    """Catalog entry of one wire fault: how to build it, the scenario it runs on, and
    how the fixed stack must end (``expect``: STOP, FINISH or EITHER; a STOP is
    ``TransferUnprovable``). Every outcome also holds every property (less
    determinism): no wrong hit, no hang, no false stop. A ``kvfault.faults.tiers.TierFault``."""

    name: str
    factory: Callable[[int], WireInjector]
    description: str
    scenario: str
    expect: Expect
    kills_server: bool = False


def _reply(name: str, action: Action, **kw: Any) -> Callable[[int], WireInjector]:
    return lambda seed: WireReplyFault(action, name=name, seed=seed, **kw)


def _server(name: str, action: Action, **kw: Any) -> Callable[[int], WireInjector]:
    return lambda seed: WireServerFault(action, name=name, seed=seed, **kw)


WIRE_SCENARIO = "real_restart_tier_kept"

WIRE_FAULTS: dict[str, WireFaultInfo] = {
    w.name: w
    for w in (
        WireFaultInfo(
            "wire_drop_retrieve",
            _reply("wire_drop_retrieve", "drop", op="prepare_retrieve", index=2),
            "the server's reply to the 3rd prepare_retrieve never reaches the client",
            WIRE_SCENARIO,
            STOP,
        ),
        WireFaultInfo(
            "wire_delay_retrieve",
            _reply(
                "wire_delay_retrieve", "delay", op="prepare_retrieve", index=2, delay_deadlines=2.0
            ),
            "the reply to the 3rd prepare_retrieve comes two transfer deadlines late",
            WIRE_SCENARIO,
            STOP,
        ),
        WireFaultInfo(
            "wire_delay_short",
            _reply(
                "wire_delay_short", "delay", op="prepare_retrieve", index=2, delay_deadlines=0.2
            ),
            "the reply to the 3rd prepare_retrieve comes a fifth of a deadline late",
            WIRE_SCENARIO,
            FINISH,
        ),
        WireFaultInfo(
            "wire_drop_store",
            _reply("wire_drop_store", "drop", op="commit_store", index=3),
            "the reply to the 4th commit_store is lost (the server kept the data)",
            WIRE_SCENARIO,
            FINISH,
        ),
        WireFaultInfo(
            "wire_duplicate",
            _reply("wire_duplicate", "duplicate", op=None, index=None, p=0.5),
            "every reply is sent twice with probability 0.5 (seeded)",
            WIRE_SCENARIO,
            FINISH,
        ),
        WireFaultInfo(
            "wire_pause",
            _server("wire_pause", "pause", op="prepare_retrieve", index=2, pause_deadlines=0.5),
            "the server is paused (SIGSTOP) at the 3rd prepare_retrieve for half a deadline",
            WIRE_SCENARIO,
            EITHER,
        ),
        WireFaultInfo(
            "wire_kill",
            _server("wire_kill", "kill", op="prepare_retrieve", index=2),
            "the server is killed (SIGKILL) at the 3rd prepare_retrieve",
            WIRE_SCENARIO,
            STOP,
            kills_server=True,
        ),
    )
}
