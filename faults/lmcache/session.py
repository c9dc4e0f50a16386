"""One real lmcache server per campaign and the tiers of each run on it (docs/design.md#tiers).

The same scenarios that run on the in-process tier in virtual time run here on a real
``lmcache`` multiprocess server (``kvfault.faults.lmcache.server.LMCacheServer``) through the
real client (``kvfault.reference.tiers.lmcache.LMCacheTier``), in real time:

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

The campaign runs on this tier through ``kvfault.faults.lmcache.executor.LMCacheExecutor``:
the same case runner and judge as the in-process tier, only the executor differs.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from kvfault.faults.lmcache.server import TMP_PREFIX, LMCacheServer, LMCacheServerWedged
from kvfault.faults.lmcache.wire_faults import WireInjector
from kvfault.faults.runs import Injector, RunContext
from kvfault.reference.clock import RealClock
from kvfault.reference.interfaces import LookupQuery, LookupResult, Page, State, TierReply
from kvfault.reference.rules import Rules
from kvfault.reference.stack.engine import EngineConfig
from kvfault.reference.tiers.lmcache import LMCacheTicket, LMCacheTier
from kvfault.reference.tiers.lmcache_client import ClientContext, loop_healthy, server_answers
from kvfault.reference.tiers.lmcache_pages import KVLayout
from kvfault.reference.types import OperationId, Request

if TYPE_CHECKING:
    from kvfault.fakes.sim import SimWorld

DEFAULT_TIME_SCALE = 0.2
# The real time a run spends on lmcache is mostly lookup round trips: the heaviest step of
# the catalog (restart_tier_kept's 24 hybrid prompts: 48 tier lookups and 306 state
# candidates) took 0.7-1.35 s on the 2-core box, at most 3.8 ms a round trip, and
# DEFAULT_TIME_SCALE (8 s bound) was chosen for that: a 3-4x margin. When a lookup costs
# k times that now (the box is loaded), a run's every real-time bound is made k times
# longer (``paced_time_scale``), up to the story's own durations.
REFERENCE_LOOKUP_S = 0.0038
MAX_TIME_SCALE = 1.0
PACE_LOOKUPS = 16  # timed lookups per measurement (after 2 untimed)
# Lookups stay fast on a box whose cores other work keeps busy (the server answers in
# its share of a core), while the run's own Python steps wait for theirs: at load 15-18
# on two cores real_restart_burst's load took 8.07 s against the 8 s bound with lookups
# at the reference pace. So the pace also measures the share of a core a runnable
# thread of the campaign gets (``cpu_share``: spin this long, CPU time over wall time)
# and stretches by its inverse when that is the larger factor.
CPU_SHARE_WINDOW_S = 0.1
# Small but real: 4 layers x 2 KV heads x 8 head dim, bf16 = 64 KiB per 256-token
# chunk, so a campaign's stores fit the pool and a block's byte-exact check is cheap.
SCENARIO_LAYOUT = KVLayout(num_layers=4, num_heads=2, head_dim=8)
DEFAULT_L1_GB = 0.25
# A lookup that gets no answer in this long is a miss (recomputing is always right).
# Real lookups take milliseconds; a stalled one must not hold a step for seconds.
LOOKUP_TIMEOUT_S = 1.0
PUMP_INTERVAL_S = 0.001
# The bound on one setup or health request (get_chunk_size, a registration, a loopback
# round trip): each is one trivial handler on a local server, answered in milliseconds
# (a fresh client's get_chunk_size 2.4 ms median, 5.8 ms p90; a whole tier setup 3.6 ms
# median, 43 ms worst of 40; at load 10 on the 2-core box). A server that has not
# answered in this long is not slow but stuck.
RPC_BOUND_S = 1.0
# A health request that missed its bound is asked once more, with this many times the
# bound, before its server or client is called wedged: a scheduler stall on a saturated
# box is not a wedge.
RETRY_FACTOR = 2.0


def paced_time_scale(
    lookup_s: float, cpu_share: float = 1.0, base: float = DEFAULT_TIME_SCALE
) -> float:
    """The time scale for a run when one lookup round trip costs ``lookup_s`` now and a
    runnable thread gets ``cpu_share`` of a core: ``base`` while lookups are as fast as
    when it was chosen (``REFERENCE_LOOKUP_S``) on a whole core, proportionally longer
    by the larger of the two slowdowns (lookups slower, or ``1 / cpu_share``), at most
    ``MAX_TIME_SCALE``."""
    slowdown = max(lookup_s / REFERENCE_LOOKUP_S, 1.0 / max(cpu_share, 1e-9))
    return min(MAX_TIME_SCALE, max(base, base * slowdown))


def cpu_share(
    window_s: float = CPU_SHARE_WINDOW_S,
    wall: Callable[[], float] = time.perf_counter,
    cpu: Callable[[], float] = time.thread_time,
) -> float:
    """The share of one core the calling thread gets now, in (0, 1]: it spins until
    ``window_s`` of ``wall`` time has passed and divides the ``cpu`` time it got by it."""
    w0, c0 = wall(), cpu()
    while (elapsed := wall() - w0) < window_s:
        pass
    return min(1.0, max(cpu() - c0, 1e-9) / elapsed)


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

    def lookup(self, query: LookupQuery) -> LookupResult:
        with self._lock:
            return self._inner.lookup(query)

    def submit_retrieve(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        state_key: int | None,
    ) -> LMCacheTicket:
        with self._lock:
            ticket = self._inner.submit_retrieve(op, tier_ids, start, end, state_key)
            self._track(op, ticket)
        return ticket

    def submit_store(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        pages: Sequence[Page],
        states: Sequence[tuple[int, int, State]],
    ) -> LMCacheTicket:
        with self._lock:
            ticket = self._inner.submit_store(op, tier_ids, start, end, pages, states)
            self._track(op, ticket)
        return ticket

    def poll(self, ticket: object) -> TierReply | None:
        with self._lock:
            return self._inner.poll(ticket)

    def wait(self, ticket: object, timeout: float) -> TierReply | None:
        """``LMCacheTier.wait``, but the pump advances the ticket: look once per pump
        interval (sleeping, not holding the lock)."""
        deadline = time.monotonic() + timeout
        while (reply := self.poll(ticket)) is None and time.monotonic() < deadline:
            time.sleep(self._interval)
        return reply

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


def _import_client(log: Any = None) -> None:
    """Import the client's torch and lmcache. With ``log`` (a file), stderr is that
    file meanwhile: lmcache gives each module's logger a stderr handler as it is
    imported and logs INFO lines at import time; they land in ``log`` instead."""
    import contextlib

    try:
        with contextlib.redirect_stderr(log) if log is not None else contextlib.nullcontext():
            import torch  # noqa: F401
            from lmcache.v1.multiprocess.transfer_context import base  # noqa: F401
            from lmcache.v1.multiprocess.transport import factory  # noqa: F401
    except ImportError:  # LMCacheServer.start says what is missing, in one line
        pass


def route_lmcache_logs(server: LMCacheServer) -> None:
    """Send the lmcache client's log lines (INFO, coloured: ~90 a campaign) to the
    server's log file, whose tail is shown when something fails, instead of stderr.
    lmcache gives every module's logger its own stderr handler, so each one that exists
    now is re-pointed; call again after code that may have made new ones."""
    import logging

    path = server.log_path
    if path is None:
        return
    ours = set(map(id, _LOG_FILES.values()))
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not name.startswith("lmcache") or not isinstance(logger, logging.Logger):
            continue
        for handler in logger.handlers:
            if type(handler) is not logging.StreamHandler:
                continue
            if handler.stream in (sys.stderr, sys.__stderr__) or id(handler.stream) in ours:
                handler.setStream(_log_file(path))


_LOG_FILES: dict[Any, Any] = {}


def _log_file(path: Any) -> Any:
    """One append handle per log, kept for the process's life (a stopped server's file
    is deleted; writing to the unlinked file is harmless)."""
    f = _LOG_FILES.get(path)
    if f is None:
        f = _LOG_FILES[path] = open(path, "a", buffering=1)  # noqa: SIM115
    return f


class LMCacheSession:
    """One real lmcache server for a whole campaign; a context manager.

    Promises: ``start()`` (or ``with``) returns once the server answers. Every run
    built from this session starts from a healthy server and a healthy client
    (``check()``, seconds at most): a server that died is started again, a live one
    that does not answer is killed and replaced (``retired`` names it), and a client
    context whose I/O no longer moves is replaced (``client_resets``). Every request
    of a tier's setup waits at most ``rpc_bound_s``. ``close()`` closes every tier
    and proxy its runs left open, stops the servers and removes their process groups,
    /dev/shm segments and temporary directories, also after a failure.
    """

    def __init__(
        self,
        *,
        l1_size_gb: float = DEFAULT_L1_GB,
        chunk_size: int = 256,
        layout: KVLayout = SCENARIO_LAYOUT,
        lookup_timeout_s: float = LOOKUP_TIMEOUT_S,
        python: str | None = None,
        rpc_bound_s: float = RPC_BOUND_S,
    ):
        if rpc_bound_s <= 0:
            raise ValueError(f"rpc_bound_s must be positive, got {rpc_bound_s}")
        self.rpc_bound_s = rpc_bound_s
        self.l1_size_gb = l1_size_gb
        self.chunk_size = chunk_size
        self.layout = layout
        self.lookup_timeout_s = lookup_timeout_s
        self.python = python
        self.server: LMCacheServer | None = None
        self.servers: list[LMCacheServer] = []  # every server started (for leftovers)
        self.starts = 0
        self.start_seconds: list[float] = []
        self.retired: list[str] = []  # one line per server killed as wedged
        self.lookup_s: float | None = None  # one lookup round trip, at the last check
        self.cpu_share: float | None = None  # a thread's share of a core, at the last check
        self.client_resets: list[str] = []  # one line per client context replaced
        self.client_context: ClientContext | None = None
        self._open: list[RealTierFactory] = []
        self._names = itertools.count()
        self._tag = uuid.uuid4().hex[:6]
        self._logdir: str | None = None

    def start(self) -> LMCacheSession:
        # The client's first import of torch and lmcache takes seconds: do it while
        # the server starts, so it is not charged to the first run's wall time.
        import tempfile

        # A start that fails or is interrupted leaves nothing: ``with`` calls no
        # ``__exit__`` when ``__enter__`` raises.
        try:
            # Named for this process, as a server's directory is: should it be killed
            # (SIGKILL: no clean-up), the next server start sweeps it away.
            self._logdir = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-client-")
            early = _log_file(Path(self._logdir) / "client.log")
            warm = threading.Thread(
                target=_import_client, args=(early,), name="kvfault-import", daemon=True
            )
            warm.start()
            try:
                self.ensure_server()
            finally:
                warm.join()
            self.client_context = ClientContext()
        except BaseException:
            self.close()
            raise
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
        route_lmcache_logs(server)
        return server

    def _twice(self, ask: Callable[[float], bool]) -> bool:
        """``ask(bound)``, and once more with ``RETRY_FACTOR`` times the bound."""
        return ask(self.rpc_bound_s) or ask(self.rpc_bound_s * RETRY_FACTOR)

    def check(self) -> LMCacheServer:
        """The second line of defence, run before every run: returns a server that
        answers, reached through a client context that moves messages. In order: a
        dead lmcache polling loop is dropped; a context whose loopback round trip does
        not come back is abandoned for a fresh one; a dead server is started again; a
        live one that does not answer a fresh client is killed and replaced (with its
        log's tail in ``retired``). Each question waits ``rpc_bound_s``, then
        ``RETRY_FACTOR`` times that once more: a few seconds at most, plus a server
        start when one is replaced."""
        if not loop_healthy():
            self.client_resets.append("lmcache's polling loop had died; a fresh one starts")
        ctx = self.client_context
        if ctx is None:
            ctx = self.client_context = ClientContext()
        elif not self._twice(ctx.io_alive):
            self.client_resets.append(
                f"the client's zmq context moved no loopback message within "
                f"{self.rpc_bound_s * RETRY_FACTOR:g}s; replaced"
            )
            ctx.abandon()
            ctx = self.client_context = ClientContext()
        server = self.ensure_server()
        if not self._twice(lambda bound: server_answers(server.url, bound, ctx)):
            wedged = LMCacheServerWedged(
                server,
                f"a fresh client's get_chunk_size within {self.rpc_bound_s:g}s, nor "
                f"within {self.rpc_bound_s * RETRY_FACTOR:g}s",
            )
            self.retired.append(str(wedged))
            self.retire(server)
            server = self.ensure_server()
        self.measure_pace(server.url)
        return server

    def measure_pace(self, url: str) -> float:
        """Time ``PACE_LOOKUPS`` lookups of one chunk through a tier of this session's
        own (a scratch namespace) at ``url``: the mean round trip, kept in
        ``lookup_s``. About 20-100 ms on the 2-core box. A lookup that gets no
        answer counts its whole timeout. Then ``cpu_share`` (100 ms), kept in
        ``cpu_share``."""
        from kvfault.reference.interfaces import LookupQuery
        from kvfault.reference.types import Geometry

        tier = LMCacheTier(
            url,
            Geometry(block_size=16, chunk_size=self.chunk_size),
            layout=self.layout,
            model_name=self.namespace("pace"),
            lookup_timeout_s=self.lookup_timeout_s,
            connect_timeout_s=self.rpc_bound_s,
            client_context=self.client_context,
        )
        try:
            query = LookupQuery(tuple(range(self.chunk_size)))
            for _ in range(2):  # the first round trips of a client pay its warm-up
                tier.lookup(query)
            t0 = time.perf_counter()
            for _ in range(PACE_LOOKUPS):
                tier.lookup(query)
            self.lookup_s = (time.perf_counter() - t0) / PACE_LOOKUPS
        finally:
            tier.close()
        self.cpu_share = cpu_share()
        return self.lookup_s

    def retire(self, server: LMCacheServer) -> None:
        """Kill ``server`` (wedged: it would not stop gracefully) and clean up after
        it; the next run starts a fresh one."""
        server.kill()
        server.stop()
        if self.server is server:
            self.server = None

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
            if self.client_context is not None:
                self.client_context.close()
                self.client_context = None
            if self._logdir is not None:
                import shutil

                shutil.rmtree(self._logdir, ignore_errors=True)
                self._logdir = None

    def __enter__(self) -> LMCacheSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RealTierFactory:
    """``RunContext.tier_factory`` of one run: every call builds a pumped
    ``LMCacheTier`` in a fresh namespace of the session's server, routed through the
    proxy of each wire-fault injector of the run. ``close()`` closes what it built.
    The first call checks the session's server and client (``LMCacheSession.check``)."""

    def __init__(
        self, session: LMCacheSession, injectors: Sequence[Injector] = (), pace: float = 1.0
    ):
        self.session = session
        self.injectors = list(injectors)
        self.pace = pace  # every real-time bound of the tier is this many times longer
        self.tiers: list[PumpedTier] = []
        self._closed = False
        self._checked = False
        session._open.append(self)

    def check(self) -> None:
        """``LMCacheSession.check`` once for this run (the first tier does it when
        nobody did before)."""
        if not self._checked:
            self._checked = True
            self.session.check()

    def checked(self) -> None:
        """The session was checked for this run already (by its executor)."""
        self._checked = True

    def __call__(self, world: SimWorld, config: EngineConfig) -> PumpedTier:
        self.check()
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
            lookup_timeout_s=self.session.lookup_timeout_s * self.pace,
            connect_timeout_s=self.session.rpc_bound_s * self.pace,
            # Not the run's seed: instance and request ids must differ between runs
            # of one seed on one server, or a late unregister of the last run's
            # instance would drop this run's context.
            rng_seed=None,
            client_context=self.session.client_context,
        )
        route_lmcache_logs(server)  # loggers lmcache made while connecting
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
        tier_factory=RealTierFactory(session, injectors, pace=time_scale / DEFAULT_TIME_SCALE),
        clock_factory=RunClock,
        time_scale=time_scale,
    )
    if request_map is not None:
        ctx.request_map = request_map
    return ctx
