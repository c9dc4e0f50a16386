"""Scenarios, wire faults and the campaign on the real LMCache tier (docs/design.md#tiers, docs/design.md#faults).

The same scenarios that run on the in-process tier in virtual time run here on a real
``lmcache`` multiprocess server (``faults.lmcache.server.LMCacheServer``) through the
real client (``reference.tiers.lmcache.LMCacheTier``), in real time:

- ``LMCacheSession`` starts one server for a whole campaign (a start costs 10-20 s on
  two cores) and always stops it and removes what it leaves (process group, /dev/shm
  segment, temporary directory).
- ``lmcache_context(session, seed, rules, injectors)`` is a ``RunContext`` whose tiers
  are ``LMCacheTier``s against that server, with a real clock (``RunClock``, zero at
  the run's start) and a time scale (``DEFAULT_TIME_SCALE``) that shrinks every
  duration a scenario sets: the 30 s transfer deadline, the 10 s bound slack, the 29 s
  compile and the 21 s step.
- Each tier a run builds gets its own model name (an lmcache key namespace), so runs
  never see each other's data, as each in-process tier starts empty; a scenario with
  two servers gets two namespaces, as it gets two in-process tiers.
- Determinism (same seed, same trace digest) does not apply in real time: reply times,
  and so the steps at which things happen, differ between runs. Real-tier cases check
  every property of their scenario except ``determinism``.

Two things make the real tier behave like the engine's real connector, not like a
test harness (both measured, see docs/lmcache_tier.md):

- ``PumpedTier``: a retrieve through lmcache takes several request/reply rounds
  (lookup, prefetch status, prepare, commit). ``LMCacheTier.poll`` advances one round
  per poll and the worker polls only between forwards, so alone it would stretch a
  retrieve over several forwards -- behind a 29 s compile and a 21 s step that is
  past the 30 s deadline. A real connector's client progresses its requests in the
  background (as ``MemoryTier`` answers after its latency whatever the poll cadence);
  the pump does that with one thread per tier, under one lock with the engine's calls.
- The time scale leaves the load bound room for real costs the virtual story puts at
  zero: a step that looks up 24 hybrid prompts on the real server takes 0.7-1.35 s on
  two cores (the bound of its first load runs meanwhile), and 24 concurrent retrieves
  take up to 1.3 s more. With scale 0.05 (bound 2 s) ``restart_tier_kept`` stopped a
  healthy engine; at 0.1 its first load finished 0.9-2.0 s after dispatch against a
  4 s bound. ``DEFAULT_TIME_SCALE`` is 0.2 (deadline 6 s, bound 8 s): a 4x margin.

Wire faults (``WIRE_FAULTS``) are injectors (``faults.injectors.base.Injector``) that put a
``faults.lmcache.wire_proxy.WireProxy`` between a run's tier client and the server and drop,
delay or duplicate chosen replies, or pause or kill the server; each fires (``fire``)
once per fault the proxy applied, with the proxy's evidence.

``run_lmcache_campaign`` runs the real-tier scenarios on the fixed stack, the planted
regressions whose scenarios run here (legacy must fail with its signature, fixed must
pass) and every wire fault, and returns the campaign's ``CaseOutcome``s, so the CLI's
table, JSON summary and JUnit writers take them as they are.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from faults.campaign.execute import CaseResult, check
from faults.campaign.runner import (
    ERROR,
    FAIL,
    FIXED,
    NOT_EXERCISED,
    NOT_REPRODUCED,
    PASS,
    STILL_FAILING,
    CampaignResult,
    Case,
    CaseOutcome,
    Target,
    TargetOutcome,
    signature,
)
from faults.injectors.base import Injector
from faults.lmcache.server import LMCacheServer
from faults.lmcache.wire_proxy import FiredFault, WireFault, WireProxy
from faults.runs import RunContext, RunResult
from faults.scenarios.simulated import (
    _BURST_CONFIG,
    SCENARIOS,
    Scenario,
    _compile_and_load,
    _renamed,
    _Run,
    _store_then_restart,
    lost_completion_in_traffic,
    two_passes,
)
from reference.clock import RealClock
from reference.rules import Rules
from reference.stack.engine import EngineConfig
from reference.tiers.lmcache import KVLayout, LMCacheTier
from reference.trace import Ev
from reference.types import Request

if TYPE_CHECKING:
    from fakes.sim import SimWorld

DEFAULT_TIME_SCALE = 0.2
# Small but real: 4 layers x 2 KV heads x 8 head dim, bf16 = 64 KiB per 256-token
# chunk, so a campaign's stores fit the pool and a block's byte-exact check is cheap.
SCENARIO_LAYOUT = KVLayout(num_layers=4, num_heads=2, head_dim=8)
DEFAULT_L1_GB = 0.25
# A lookup that gets no answer in this long is a miss (recomputing is always right).
# Real lookups take milliseconds; a stalled one must not hold a step for seconds.
LOOKUP_TIMEOUT_S = 1.0
PUMP_INTERVAL_S = 0.001

# -- the clock -----------------------------------------------------------------------


class RunClock(RealClock):
    """``RealClock`` whose zero is the moment the run's clock was made, so trace times
    read as seconds into the run (``RunResult.sim_seconds`` is the run's wall time)."""

    def __init__(self) -> None:
        self._origin = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._origin


# -- background progress ---------------------------------------------------------------


class PumpedTier:
    """An ``LMCacheTier`` whose submitted operations progress in the background.

    A daemon thread polls every pending ticket every ``interval_s`` (``poll`` never
    blocks), so a retrieve advances through its request/reply rounds while the engine
    runs a forward, as a real connector's client does. Every call into the tier --
    the engine's ``lookup``/``submit_*``/``poll`` and the pump's -- holds one lock, so
    the tier is only ever used by one thread at a time. Anything else is the tier's.
    """

    def __init__(self, inner: LMCacheTier, interval_s: float = PUMP_INTERVAL_S):
        self._inner = inner
        self._lock = threading.Lock()
        self._pending: list[Any] = []
        self._stop = threading.Event()
        self._interval = interval_s
        self.tickets: dict[str, Any] = {}  # str(op) -> ticket: the stage a stop waited on
        self._thread = threading.Thread(target=self._pump, name="kvfault-tier-pump", daemon=True)
        self._thread.start()

    @property
    def inner(self) -> LMCacheTier:
        return self._inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def lookup(self, query):  # type: ignore[no-untyped-def]
        with self._lock:
            return self._inner.lookup(query)

    def submit_retrieve(self, op, tier_ids, start, end, state_key):  # type: ignore[no-untyped-def]
        with self._lock:
            ticket = self._inner.submit_retrieve(op, tier_ids, start, end, state_key)
            self._track(op, ticket)
        return ticket

    def submit_store(self, op, tier_ids, start, end, pages, states):  # type: ignore[no-untyped-def]
        with self._lock:
            ticket = self._inner.submit_store(op, tier_ids, start, end, pages, states)
            self._track(op, ticket)
        return ticket

    def poll(self, ticket: object):  # type: ignore[no-untyped-def]
        with self._lock:
            return self._inner.poll(ticket)

    def _track(self, op: Any, ticket: Any) -> None:
        self.tickets[str(op)] = ticket
        if ticket.reply is None:
            self._pending.append(ticket)

    def _pump(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                if self._stop.is_set():
                    return
                still = []
                for ticket in self._pending:
                    try:
                        self._inner.poll(ticket)
                    except Exception:  # a broken ticket stays pending; the deadline names it
                        pass
                    if ticket.reply is None:
                        still.append(ticket)
                self._pending = still

    def close(self) -> None:
        """Stop the pump and close the tier (unregister, close the client)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._lock:
            self._inner.close()


# -- the session and one run's tiers -------------------------------------------------------


def _import_client() -> None:
    try:
        import torch  # noqa: F401
        from lmcache.v1.multiprocess.transfer_context import base  # noqa: F401
        from lmcache.v1.multiprocess.transport import factory  # noqa: F401
    except ImportError:  # LMCacheServer.start says what is missing, in one line
        pass


class LMCacheSession:
    """One real lmcache server for a whole campaign; a context manager.

    Promises: ``start()`` (or ``with``) returns once the server answers; ``server``
    is live at the start of every run built from this session (a run whose wire fault
    killed it gets a new one: ``starts`` counts them); ``close()`` closes every tier
    and proxy its runs left open, stops the server and removes its process group,
    /dev/shm segment and temporary directory, also after a failure.
    """

    def __init__(
        self,
        *,
        l1_size_gb: float = DEFAULT_L1_GB,
        chunk_size: int = 256,
        layout: KVLayout = SCENARIO_LAYOUT,
        lookup_timeout_s: float = LOOKUP_TIMEOUT_S,
        python: str | None = None,
    ):
        self.l1_size_gb = l1_size_gb
        self.chunk_size = chunk_size
        self.layout = layout
        self.lookup_timeout_s = lookup_timeout_s
        self.python = python
        self.server: LMCacheServer | None = None
        self.servers: list[LMCacheServer] = []  # every server started (for leftovers)
        self.starts = 0
        self.start_seconds: list[float] = []
        self._open: list[RealTierFactory] = []
        self._names = itertools.count()
        self._tag = uuid.uuid4().hex[:6]

    def start(self) -> LMCacheSession:
        # The client's first import of torch and lmcache takes seconds: do it while
        # the server starts, so it is not charged to the first run's wall time.
        warm = threading.Thread(target=_import_client, name="kvfault-import", daemon=True)
        warm.start()
        try:
            self.ensure_server()
        finally:
            warm.join()
        return self

    def ensure_server(self) -> LMCacheServer:
        """The live server, started (again) when there is none or it died."""
        if self.server is not None and self.server.alive():
            return self.server
        if self.server is not None:
            self.server.stop()
        server = LMCacheServer(
            chunk_size=self.chunk_size, l1_size_gb=self.l1_size_gb, python=self.python
        )
        self.servers.append(server)
        self.server = server
        server.start()
        self.starts += 1
        self.start_seconds.append(server.start_seconds or 0.0)
        return server

    def namespace(self, tag: str = "run") -> str:
        """A model name no other tier of this session uses (its own key namespace)."""
        return f"kvf-{self._tag}-{tag}-{next(self._names)}"

    def close_runs(self) -> None:
        """Close every tier and proxy a run of this session left open."""
        while self._open:
            self._open.pop().close()

    def leftovers(self) -> list[str]:
        """What of any server this session started still exists (empty after close)."""
        return [item for s in self.servers for item in s.leftovers()]

    def close(self) -> None:
        try:
            self.close_runs()
        finally:
            for s in self.servers:
                s.stop()
            self.server = None

    def __enter__(self) -> LMCacheSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RealTierFactory:
    """``RunContext.tier_factory`` of one run: every call builds a pumped
    ``LMCacheTier`` in a fresh namespace of the session's server, routed through the
    proxy of each wire-fault injector of the run. ``close()`` closes what it built."""

    def __init__(self, session: LMCacheSession, injectors: Sequence[Injector] = ()):
        self.session = session
        self.injectors = list(injectors)
        self.tiers: list[PumpedTier] = []
        self._closed = False
        session._open.append(self)

    def __call__(self, world: SimWorld, config: EngineConfig) -> PumpedTier:
        server = self.session.ensure_server()
        url = server.url
        for inj in self.injectors:
            if isinstance(inj, WireInjector):
                url = inj.route(url, server, config)
        tier = LMCacheTier(
            url,
            config.geometry,
            layout=self.session.layout,
            model_name=self.session.namespace(),
            lookup_timeout_s=self.session.lookup_timeout_s,
            # Not the run's seed: instance and request ids must differ between runs
            # of one seed on one server, or a late unregister of the last run's
            # instance would drop this run's context.
            rng_seed=None,
        )
        pumped = PumpedTier(tier)
        self.tiers.append(pumped)
        return pumped

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for tier in self.tiers:
            tier.close()
        for inj in self.injectors:
            if isinstance(inj, WireInjector):
                inj.close()
        if self in self.session._open:
            self.session._open.remove(self)


def lmcache_context(
    session: LMCacheSession,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: Sequence[Injector] = (),
    time_scale: float = DEFAULT_TIME_SCALE,
    request_map: Callable[[Request], Request] | None = None,
) -> RunContext:
    """A ``RunContext`` for one run on the session's real server (module docstring).
    Its ``tier_factory`` is a ``RealTierFactory``: close it after the run (or let
    ``session.close_runs()`` / ``session.close()`` do it)."""
    ctx = RunContext(
        seed=seed,
        rules=rules or Rules(),
        injectors=list(injectors),
        tier_factory=RealTierFactory(session, injectors),
        clock_factory=RunClock,
        time_scale=time_scale,
    )
    if request_map is not None:
        ctx.request_map = request_map
    return ctx


# -- wire faults ---------------------------------------------------------------------


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

    def lookup(self, query):  # type: ignore[no-untyped-def]
        self._injector.drain()
        return self._inner.lookup(query)

    def submit_retrieve(self, *args):  # type: ignore[no-untyped-def]
        self._injector.drain()
        return self._inner.submit_retrieve(*args)

    def submit_store(self, *args):  # type: ignore[no-untyped-def]
        self._injector.drain()
        return self._inner.submit_store(*args)

    def poll(self, ticket: object):  # type: ignore[no-untyped-def]
        self._injector.drain()
        return self._inner.poll(ticket)


class WireReplyFault(WireInjector):
    """Drop, delay or duplicate replies of lmcache operation ``op`` (``None``: any):
    the ``index``-th message of it (0-based, over the run; ``None``: every one), each
    with probability ``p`` (drawn from the run's seed). A delay is ``delay_deadlines``
    times the run's transfer deadline, so it means the same at every time scale."""

    def __init__(
        self,
        action: str,
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
                self.action,  # type: ignore[arg-type]
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
        action: str,
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
        return [WireFault(self.action, op=self.op, index=self.index, delay_s=delay)]  # type: ignore[arg-type]

    def describe(self) -> str:
        extra = f" for {self.pause_deadlines:g}xD" if self.action == "pause" else ""
        return f"{self.name}({self.action} at {self.op}#{self.index}{extra})"


# Expected outcomes of a wire fault on the fixed stack.
STOP = "stop"  # a named stop: TransferUnprovable naming a load
FINISH = "finish"  # no stop; every request answered
EITHER = "either"  # finish, or a named stop


@dataclass(frozen=True)
class WireFaultInfo:
    """Catalog entry of one wire fault: how to build it, the scenario it runs on, and
    how the fixed stack must end (``expect``: STOP, FINISH or EITHER; a STOP is
    ``TransferUnprovable``). Every outcome also holds every property (less
    determinism): no wrong hit, no hang, no false stop."""

    name: str
    factory: Callable[[int], WireInjector]
    description: str
    scenario: str
    expect: str
    kills_server: bool = False


def _reply(name: str, action: str, **kw: Any) -> Callable[[int], WireInjector]:
    return lambda seed: WireReplyFault(action, name=name, seed=seed, **kw)


def _server(name: str, action: str, **kw: Any) -> Callable[[int], WireInjector]:
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


# -- real-tier scenarios (registered into SCENARIOS) ---------------------------------------


def real_restart_tier_kept(ctx: RunContext) -> RunResult:
    """``restart_tier_kept`` with 8 prompts instead of 24: pass 1 stores, the engine
    restarts with the tier kept, pass 2 loads (hybrid, MP grid). The wire faults' run:
    small enough for real time, with loads enough to hit the 3rd of them."""
    return two_passes(ctx, "real_restart_tier_kept", prompts=8)


def real_restart_burst(ctx: RunContext) -> RunResult:
    """``restart_burst`` with 16 restores instead of 64 (plus two cold requests that
    keep the forwards busy) behind the 29 s compile and the 21 s step: enough loads
    that bounds counted from dispatch, or a copy deadline counted from submission,
    run out; few enough for a real server on two cores. Only the restarted engine
    compiles slowly (the storing pass is not the story and would double the wall
    time). Healthy: no stop."""
    from faults.injectors.base import SlowForward

    slow = SlowForward({})
    run = _Run("real_restart_burst", ctx, _BURST_CONFIG, [slow])
    engine = run.engine()
    reqs = run.workloads.burst(16, 1024).requests
    _store_then_restart(run, engine, reqs)
    slow.durations.update(_compile_and_load(ctx).durations)
    cold = run.workloads.burst(2, 4096).requests
    run.submit(engine, _renamed(run, reqs, "burst") + _renamed(run, cold, "cold"))
    run.run(engine)
    return run.result()


def real_lost_completion_burst(ctx: RunContext) -> RunResult:
    """``lost_completion_burst`` at real-tier size: a burst of 16 restores while 20
    more restoring requests arrive every 2 s (40 s of traffic); the completion of the
    8th load is lost. The engine must stop naming that load one bound after the loads
    ahead of it finished, while traffic still flows."""
    return lost_completion_in_traffic(ctx, "real_lost_completion_burst", 16, 20, lost=8)


_PROPS = ("correctness", "keys", "no_false_stop", "liveness", "determinism")
SCENARIOS.update(
    {
        s.name: s
        for s in (
            Scenario(
                "real_restart_tier_kept",
                "restart_tier_kept with 8 prompts: pass 1 stores, restart, pass 2 loads (real-tier size)",
                real_restart_tier_kept,
                (*_PROPS, "grid", "hybrid"),
            ),
            Scenario(
                "real_restart_burst",
                "16 restores after a restart behind a 29 s first forward and a 21 s step (real-tier size)",
                real_restart_burst,
                (*_PROPS, "grid"),
            ),
            Scenario(
                "real_lost_completion_burst",
                "a lost load completion in a burst of 16 while 20 more requests arrive (real-tier size)",
                real_lost_completion_burst,
                (*_PROPS, "grid"),
            ),
        )
    }
)

# The scenarios the real-tier campaign runs on the fixed stack.
REAL_SCENARIOS: tuple[str, ...] = (
    "restart_tier_kept",
    "two_images",
    "chunk_aligned_hybrid",
    "two_servers",
    "real_restart_tier_kept",
    "real_restart_burst",
    "real_lost_completion_burst",
)

# Planted regressions whose scenario runs on the real tier: name -> the scenario it runs
# on here (the real-tier size of its own scenario). Left out, each for a reason that
# holds on the real tier:
# - restart_numbering_in_hash_order: caught only under some PYTHONHASHSEED values (its
#   proof is `kvfault sweep`, which is about hash order, not about the tier);
# - hybrid_last_chunk: the MP server keeps state images only on the chunk grid, so a
#   chunk-aligned prompt's joint boundary is already a chunk boundary (1792 of 2048)
#   and the legacy give-back loses nothing there: legacy and fixed both load 1792
#   tokens. The regression lives on the block grid of the in-process tier.
REAL_REGRESSIONS: dict[str, str] = {
    "media_keys": "two_images",
    "side_chain_seed": "two_images",
    "engine_id_without_port": "two_servers",
    "anchors_off_mp_grid": "restart_tier_kept",
    "restore_deadline_from_submission": "real_restart_burst",
    "load_bound_without_restart": "real_restart_burst",
    "restart_all_over_fix": "real_lost_completion_burst",
}


def real_properties(scenario: str) -> list[str]:
    """The properties a real-tier run of ``scenario`` checks: all of its own except
    ``determinism`` (real time: traces differ between runs of one seed)."""
    return [p for p in SCENARIOS[scenario].properties if p != "determinism"]


# -- running one case -----------------------------------------------------------------------


def run_real_case(
    session: LMCacheSession,
    scenario: str,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: Sequence[Injector] = (),
    properties: Sequence[str] | None = None,
    time_scale: float = DEFAULT_TIME_SCALE,
) -> CaseResult:
    """Run ``scenario`` once on the session's real server and judge it (properties:
    ``real_properties(scenario)`` unless given; ``determinism`` is never checked).
    The run's tiers and proxies are closed before this returns. ``notes`` add the
    tier, the time scale, lookup timeouts and, for a stop, the lmcache request the
    stopped load waited on (``stuck_stage``)."""
    if scenario not in SCENARIOS:
        raise KeyError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    props = [p for p in (properties or real_properties(scenario)) if p != "determinism"]
    ctx = lmcache_context(session, seed, rules, injectors, time_scale)
    factory = ctx.tier_factory
    assert isinstance(factory, RealTierFactory)
    t0 = time.perf_counter()
    try:
        run = SCENARIOS[scenario].run(ctx)
    finally:
        factory.close()  # also reports wire firings seen after the last poll
    wall = time.perf_counter() - t0
    violations = check(run, props)
    stop = run.stop
    notes: dict[str, object] = dict(run.notes)
    notes.update(
        tier="lmcache",
        time_scale=time_scale,
        lookup_timeouts=sum(t.inner.lookup_timeouts for t in factory.tiers),
    )
    if stop is not None:
        for tier in factory.tiers:
            ticket = tier.tickets.get(str(stop.op))
            if ticket is not None and ticket.reply is None:
                notes["stuck_stage"] = ticket.stage
    fired: dict[str, int] = {}
    for inj in run.injectors:
        fired[inj.name] = fired.get(inj.name, 0) + inj.fired
    return CaseResult(
        scenario=scenario,
        seed=seed,
        checked=props,
        violations=violations,
        sim_seconds=run.sim_seconds,
        wall_seconds=wall,
        digest=run.trace.digest(),
        stop=(f"{type(stop).__name__}: {stop}" if stop else run.startup_error),
        fired=fired,
        notes=notes,
        run=run,
    )


def stop_error(result: CaseResult) -> str | None:
    """The name of the error a run stopped with, or None."""
    if result.run is None:
        return None
    stop = next(iter(result.run.trace.of(Ev.STOP)), None)
    return stop.data.get("error") if stop is not None else None


# -- the campaign ------------------------------------------------------------------------


@dataclass(frozen=True)
class LMCacheTarget(Target):
    """A campaign target run on the real tier: its id and command say so, and it has no
    ``FaultPlan`` (a wire fault is not an in-process plan injector)."""

    @property
    def id(self) -> str:
        return f"lmcache:{self.kind}:{self.name}"

    def plan(self, seed: int) -> None:  # type: ignore[override]
        return None

    def command(self, seed: int) -> str:
        base = f"kvfault run --tier lmcache --first-seed {seed} --seeds 1"
        flag = {"regression": "--regression", "fault": "--fault"}.get(self.kind, "--scenario")
        return f"{base} {flag} {self.name}"

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "tier": "lmcache"}


def lmcache_targets(
    include_regressions: bool = True,
    scenarios: Sequence[str] | None = None,
    regressions: Sequence[str] | None = None,
    wire_faults: Sequence[str] | None = None,
) -> list[LMCacheTarget]:
    """The real-tier campaign's targets, in run order: scenarios, regressions, wire
    faults (those that kill the server last, so it is restarted as rarely as
    possible). With no names at all, every one of ``REAL_SCENARIOS``,
    ``REAL_REGRESSIONS`` (unless ``include_regressions`` is false) and
    ``WIRE_FAULTS``; naming any group runs only what is named, as ``kvfault run
    --scenario/--regression/--fault`` do. Unknown names raise ``KeyError`` (one line,
    with the known names)."""
    everything = scenarios is None and regressions is None and wire_faults is None
    scen = list(REAL_SCENARIOS) if everything else list(scenarios or ())
    regs = list(REAL_REGRESSIONS) if everything else list(regressions or ())
    wires = list(WIRE_FAULTS) if everything else list(wire_faults or ())
    for group, known, names in (
        ("real-tier scenario", SCENARIOS, scen),
        ("real-tier regression", REAL_REGRESSIONS, regs),
        ("wire fault", WIRE_FAULTS, wires),
    ):
        for n in names:
            if n not in known:
                raise KeyError(f"unknown {group} {n!r}; known: {', '.join(known)}")
    out = [LMCacheTarget("scenario", s, s) for s in scen]
    if include_regressions:
        out += [LMCacheTarget("regression", r, REAL_REGRESSIONS[r], regression=r) for r in regs]
    wires.sort(key=lambda w: WIRE_FAULTS[w].kills_server)
    out += [LMCacheTarget("fault", w, WIRE_FAULTS[w].scenario, injector=w) for w in wires]
    return out


class LMCacheCaseRunner:
    """Runs real-tier cases on one session and judges them as the campaign does.
    The fixed stack's plain run of a (scenario, seed) is run once and shared by the
    scenario target and every regression on that scenario."""

    def __init__(self, session: LMCacheSession, time_scale: float = DEFAULT_TIME_SCALE):
        self.session = session
        self.time_scale = time_scale
        self._fixed: dict[tuple[str, int], CaseResult] = {}

    def fixed(self, scenario: str, seed: int) -> CaseResult:
        key = (scenario, seed)
        if key not in self._fixed:
            self._fixed[key] = run_real_case(
                self.session, scenario, seed, time_scale=self.time_scale
            )
        return self._fixed[key]

    def run(self, case: Case) -> CaseOutcome:
        """Run and judge ``case``; an exception is an ERROR verdict, not a crash."""
        import traceback

        t0 = time.perf_counter()
        try:
            out = self._judge(case)
        except Exception as exc:
            out = CaseOutcome(
                case, ERROR, signature=f"{type(exc).__name__}: {exc}", error=traceback.format_exc()
            )
        finally:
            self.session.close_runs()
        out.wall_seconds = time.perf_counter() - t0
        return out

    def _judge(self, case: Case) -> CaseOutcome:
        t = case.target
        if t.kind == "regression":
            return self._judge_regression(case)
        if t.kind == "fault":
            return self._judge_wire(case)
        res = self.fixed(t.scenario, case.seed)
        out = CaseOutcome.of_run(case, res, dict(res.fired))
        if not res.ok:
            out.verdict, out.signature = FAIL, signature(res)
        return out

    def _judge_regression(self, case: Case) -> CaseOutcome:
        from faults.regressions.legacy import REGRESSIONS

        reg = REGRESSIONS[str(case.target.regression)]
        scenario = case.target.scenario
        legacy = run_real_case(
            self.session, scenario, case.seed, rules=reg.rules, time_scale=self.time_scale
        )
        fixed = self.fixed(scenario, case.seed)
        out = CaseOutcome(
            case,
            FIXED,
            violations=[str(v) for v in fixed.violations],
            legacy_violations=[str(v) for v in legacy.violations],
            stop=fixed.stop,
            legacy_stop=legacy.stop,
            fired=dict(legacy.fired),
            sim_seconds=legacy.sim_seconds + fixed.sim_seconds,
            digest=fixed.digest,
            checked=list(fixed.checked),
            legacy_result=legacy,
            fixed_result=fixed,
        )
        if not fixed.ok:
            out.verdict, out.signature = STILL_FAILING, signature(fixed)
        elif any(v.prop == reg.signature for v in legacy.violations):
            out.signature = signature(legacy, reg.signature)
        else:
            out.verdict = NOT_REPRODUCED
            out.signature = (
                f"legacy failed, but not with its signature {reg.signature}: {signature(legacy)}"
                if legacy.violations
                else f"legacy passed every property; {reg.signature} expected to fail"
            )
        return out

    def _judge_wire(self, case: Case) -> CaseOutcome:
        info = WIRE_FAULTS[str(case.target.injector)]
        injector = info.factory(case.seed)
        res = run_real_case(
            self.session, info.scenario, case.seed, injectors=[injector],
            time_scale=self.time_scale,
        )  # fmt: skip
        fired = {injector.name: injector.fired}
        out = CaseOutcome.of_run(case, res, fired)
        verdict, sig = judge_wire(info, res, injector.fired)
        out.verdict, out.signature = verdict, sig
        return out


def judge_wire(info: WireFaultInfo, res: CaseResult, fired: int) -> tuple[str, str]:
    """The verdict on a wire fault's run: FAIL when a property failed or the ending is
    not the expected one, NOT EXERCISED when the fault never fired, else PASS."""
    if not res.ok:
        return FAIL, signature(res)
    if not fired:
        return NOT_EXERCISED, f"{info.name} never fired on {info.scenario} with seed {res.seed}"
    stopped = stop_error(res)
    if info.expect == STOP and stopped != "TransferUnprovable":
        got = f"stopped with {stopped}" if stopped else "did not stop"
        return FAIL, f"{info.name}: the fixed stack must stop with TransferUnprovable; it {got}"
    if info.expect == FINISH and stopped:
        return FAIL, f"{info.name}: the fixed stack must finish; it stopped: {res.stop}"
    if info.expect == EITHER and stopped not in (None, "TransferUnprovable"):
        return FAIL, f"{info.name}: finish or TransferUnprovable expected; got {stopped}"
    return PASS, ""


Progress = Callable[[int, int, Case], None]


def run_lmcache_campaign(
    seeds: int = 1,
    include_regressions: bool = True,
    progress: Progress | None = None,
    *,
    first_seed: int = 0,
    time_scale: float = DEFAULT_TIME_SCALE,
    session: LMCacheSession | None = None,
    targets: Sequence[LMCacheTarget] | None = None,
    before: Callable[[Case], Any] | None = None,
    after: Callable[[Case, CaseOutcome, Any], None] | None = None,
) -> list[CaseOutcome]:
    """The campaign on the real tier: every target of ``lmcache_targets`` (or
    ``targets``) over seeds ``first_seed .. first_seed + seeds - 1``, target by target.

    Starts one ``LMCacheSession`` (unless ``session`` is given, which is left open)
    and always closes it. ``progress(done, total, case)`` is called before each case
    and once at the end; ``before(case)``/``after(case, outcome, token)`` as in
    ``faults.campaign.runner.run_target``. Each outcome's ``fired`` says which injectors
    fired (the wire fault's, or a scenario's own). Raises
    ``faults.lmcache.server.LMCacheNotInstalled`` when lmcache is missing.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    chosen = list(targets) if targets is not None else lmcache_targets(include_regressions)
    if not include_regressions:
        chosen = [t for t in chosen if t.kind != "regression"]
    seed_list = list(range(first_seed, first_seed + seeds))
    own = session is None
    sess = session or LMCacheSession()
    outcomes: list[CaseOutcome] = []
    total = len(chosen) * len(seed_list)
    try:
        sess.start()
        runner = LMCacheCaseRunner(sess, time_scale)
        for target in chosen:
            for seed in seed_list:
                case = Case(target, seed)
                if progress:
                    progress(len(outcomes), total, case)
                token = before(case) if before else None
                outcome = runner.run(case)
                if after:
                    after(case, outcome, token)
                outcomes.append(outcome)
        if progress and outcomes:
            progress(total, total, outcomes[-1].case)
    finally:
        if own:
            sess.close()
    return outcomes


def lmcache_campaign_result(
    outcomes: Sequence[CaseOutcome], wall_seconds: float = 0.0
) -> CampaignResult:
    """Group outcomes by target (in first-seen order) into the ``CampaignResult`` that
    ``faults.cli.format_campaign`` and the report writers take."""
    by_target: dict[str, TargetOutcome] = {}
    for o in outcomes:
        t = by_target.setdefault(o.case.target.id, TargetOutcome(o.case.target, []))
        t.cases.append(o)
    return CampaignResult(list(by_target.values()), wall_seconds)


__all__ = [
    "DEFAULT_TIME_SCALE",
    "EITHER",
    "FINISH",
    "LMCacheCaseRunner",
    "LMCacheSession",
    "LMCacheTarget",
    "PumpedTier",
    "REAL_REGRESSIONS",
    "REAL_SCENARIOS",
    "RealTierFactory",
    "RunClock",
    "STOP",
    "WIRE_FAULTS",
    "WireFaultInfo",
    "WireInjector",
    "WireReplyFault",
    "WireServerFault",
    "judge_wire",
    "lmcache_campaign_result",
    "lmcache_context",
    "real_properties",
    "run_lmcache_campaign",
    "run_real_case",
    "stop_error",
]
