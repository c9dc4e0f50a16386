"""Fault injectors: each wraps one collaborator of the reference stack.

An injector never changes ``reference/``; it is handed each collaborator as an engine
is assembled (``wrap(role, part)``, roles ``timer``, ``tier``, ``channel``, ``copy``)
and returns it or a wrapper around it. Two further hooks cover faults that are not a
collaborator's behaviour: ``configure`` rewrites a run's startup settings (port-0 ids)
and ``request_map`` rewrites request ids before they enter the stack (hash-order
shuffle).

Triggers are data: ``nth`` (1-based counts of the injector's operation over the whole
run) and ``p`` (a probability per operation, drawn from ``random.Random`` seeded with
the run's seed and the injector's name, never from global randomness). Every time an
injector actually injects, it calls ``fire``: the count feeds the run's fired report
and a ``fault`` trace event carries the evidence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

from reference.errors import RestoreFenceError
from reference.interfaces import (
    CompletionChannel,
    CopyEngine,
    ForwardTimer,
    LookupQuery,
    LookupResult,
    Tier,
    TierReply,
)
from reference.trace import Ev, Trace
from reference.types import Completion, OperationId, OpKind, Outcome, Request

if TYPE_CHECKING:  # scenarios import this module; the hooks only need the type
    from faults.runs import RunContext


@dataclass(frozen=True)
class Trigger:
    """Which operations a fault hits: the ``nth`` ones (1-based, counted over the run)
    and each other one with probability ``p`` (drawn from the injector's seeded rng)."""

    nth: tuple[int, ...] = ()
    p: float = 0.0

    def __post_init__(self) -> None:
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.nth):
            raise ValueError(f"trigger nth must be 1-based counts, got {list(self.nth)}")
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"trigger p must lie in [0, 1], got {self.p}")

    def hits(self, count: int, rng: random.Random) -> bool:
        # Draw only when a probability is set, so an nth-only trigger consumes no
        # randomness and adding one never shifts another injector's draws.
        drawn = self.p > 0.0 and rng.random() < self.p
        return count in self.nth or drawn

    def describe(self) -> str:
        parts = [f"nth={list(self.nth)}"] if self.nth else []
        if self.p:
            parts.append(f"p={self.p:g}")
        return ", ".join(parts) or "never"


class Injector:
    """Base: wraps nothing. Subclasses override ``wrap_<role>`` for their role.

    ``seed`` is the run's seed; ``rng`` is this injector's own stream drawn from it.
    ``spec`` is set when a fault plan built the injector (a scenario's own faults have
    none), so a report can tell planned faults from the workload's.
    """

    name: ClassVar[str] = "injector"

    def __init__(self, seed: int = 0) -> None:
        self.fired = 0
        self.seed = seed
        # A str seed is hashed with sha512: the stream does not depend on PYTHONHASHSEED.
        self.rng = random.Random(f"{self.name}/{seed}")
        self.spec: Any = None
        self._trace: Trace | None = None
        self._unbound: list[tuple[OperationId | None, dict[str, Any]]] = []

    def bind(self, trace: Trace) -> None:
        """Attach the run's trace; evidence fired before (``configure``) is recorded now."""
        self._trace = trace
        pending, self._unbound = self._unbound, []
        for op, evidence in pending:
            trace.record(Ev.FAULT, op=op, injector=self.name, **evidence)

    def fire(self, op: OperationId | None = None, **evidence: Any) -> None:
        """Count one injection and record its evidence as a ``fault`` trace event."""
        self.fired += 1
        if self._trace is None:
            self._unbound.append((op, evidence))
        else:
            self._trace.record(Ev.FAULT, op=op, injector=self.name, **evidence)

    def wrap(self, role: str, part: Any) -> Any:
        method = getattr(self, f"wrap_{role}", None)
        return method(part) if method else part

    def configure(self, ctx: RunContext) -> RunContext:
        """A configuration fault returns a changed copy of the run's context."""
        return ctx

    def request_map(self) -> Callable[[Request], Request] | None:
        """A map applied to every request before it enters the stack, or None."""
        return None

    def replay_map(self) -> Callable[[Request], Request] | None:
        """The map of the determinism re-run (default: the same as ``request_map``)."""
        return self.request_map()

    def describe(self) -> str:
        return self.name


# -- timer ---------------------------------------------------------------------------


class SlowForward(Injector):
    """Chosen forwards take long: ``durations`` maps a forward index (0 = the first
    forward after an engine start, which compiles kernels) to its seconds; with ``p``
    any other forward takes ``seconds`` with that probability (host load)."""

    name = "slow_forward"

    def __init__(
        self, durations: dict[int, float], *, p: float = 0.0, seconds: float = 21.0, seed: int = 0
    ):
        super().__init__(seed)
        if any(d < 0 for d in durations.values()) or seconds < 0:
            raise ValueError("slow_forward durations must be >= 0")
        self.durations = dict(durations)
        self.trigger = Trigger(p=p)
        self.seconds = seconds
        self._count = 0

    def wrap_timer(self, timer: ForwardTimer) -> ForwardTimer:
        injector = self

        class _Timer:
            def duration(self, forward_index: int, num_tokens: int) -> float:
                injector._count += 1
                if forward_index in injector.durations:
                    seconds = injector.durations[forward_index]
                elif injector.trigger.hits(injector._count, injector.rng):
                    seconds = injector.seconds
                else:
                    return timer.duration(forward_index, num_tokens)
                injector.fire(forward=forward_index, seconds=seconds)
                return seconds

        return _Timer()

    def describe(self) -> str:
        extra = f", {self.trigger.describe()} -> {self.seconds:g}s" if self.trigger.p else ""
        return f"{self.name}({self.durations}{extra})"


class EngineCrash(RuntimeError):
    """Raised by ``EngineRestart`` out of a forward: the engine process dies mid-step.
    A scenario that expects crashes restarts the engine with its tier kept."""


class EngineRestart(Injector):
    """The engine dies at chosen forwards (the ``nth`` forward of the run, 1-based, or
    each with probability ``p``), at most ``limit`` times; HBM, scheduler and worker
    state are gone while the tier keeps its data. The scenario restarts the engine and
    sends the unanswered requests again.

    A crash is an exception out of the step loop: only a scenario that restarts a dead
    engine arms the injector (``arm_crashes``); elsewhere it never fires, so a plan
    using it there is reported as not exercised rather than crashing the run."""

    name = "engine_restart"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, limit: int = 3, seed: int = 0):
        super().__init__(seed)
        if limit < 1:
            raise ValueError(f"engine_restart limit must be >= 1, got {limit}")
        self.trigger = Trigger(tuple(nth), p)
        self.limit = limit
        self.armed = False
        self._count = 0

    def wrap_timer(self, timer: ForwardTimer) -> ForwardTimer:
        injector = self

        class _Timer:
            def duration(self, forward_index: int, num_tokens: int) -> float:
                if not injector.armed:
                    return timer.duration(forward_index, num_tokens)
                injector._count += 1
                if injector.fired < injector.limit and injector.trigger.hits(
                    injector._count, injector.rng
                ):
                    injector.fire(forward=injector._count, tokens=num_tokens)
                    raise EngineCrash(f"injected crash at forward {injector._count} of the run")
                return timer.duration(forward_index, num_tokens)

        return _Timer()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, limit={self.limit})"


# -- channel (worker -> scheduler) -----------------------------------------------------


class LostCompletion(Injector):
    """The worker-to-scheduler completion of chosen loads never arrives: the ``nth``
    finished load reports (1-based, counted over the run) are dropped, and each other
    one with probability ``p``."""

    name = "lost_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.nth = set(nth)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                kept = []
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, direction="worker->scheduler")
                            continue
                    kept.append(c)
                channel.put(kept)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LostSaveCompletion(Injector):
    """The worker-to-scheduler completion of chosen saves never arrives: the ``nth``
    save reports (1-based, over the run, finished or failed) are dropped, and each
    other one with probability ``p``. A store is best effort: the stack must neither
    wait for it nor stop."""

    name = "lost_save_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                kept = []
                for c in completions:
                    if c.op.kind is OpKind.SAVE:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, direction="worker->scheduler")
                            continue
                    kept.append(c)
                channel.put(kept)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class DuplicateCompletion(Injector):
    """Chosen finished load completions reach the scheduler twice (a retried send):
    the ``nth`` finished load reports (1-based, over the run), and each other one with
    probability ``p``. The scheduler must apply the first and treat the copy as stale."""

    name = "duplicate_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                out = list(completions)
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector.fire(op=c.op, copies=2)
                            out.append(c)
                channel.put(out)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LateCompletion(Injector):
    """Chosen finished load completions are held back and reach the scheduler only
    after the engine restarted: with the first completions the worker of the next
    engine build reports, when that scheduler may already have dispatched its own
    loads (a message from the dead process still in the socket). The ``nth`` finished
    load reports (1-based, over the run) are held, and each other one with
    probability ``p``. The new scheduler must not mistake it for one of its own."""

    name = "late_completion"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._seen = 0
        self._held: list[Completion] = []

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self
        # Called once per engine build: what was held under an earlier build is late now.
        late, injector._held = injector._held, []

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                out = []
                for c in completions:
                    if c.op.kind is OpKind.LOAD and c.outcome is Outcome.FINISHED:
                        injector._seen += 1
                        if injector.trigger.hits(injector._seen, injector.rng):
                            injector._held.append(c)
                            continue
                    out.append(c)
                if late:
                    for c in late:
                        injector.fire(op=c.op, delivered="after restart")
                    out = [*late, *out]
                    late.clear()
                channel.put(out)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


# -- tier (tier <-> worker) ------------------------------------------------------------


class _TierProxy:
    """Forwards everything to the wrapped tier; subclasses change one operation.
    Attributes a proxy does not define (``chunk_size``, ``drop_chunk``, ...) are the
    wrapped tier's, so proxies stack."""

    def __init__(self, inner: Tier):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def lookup(self, query: LookupQuery) -> LookupResult:
        return self._inner.lookup(query)

    def submit_retrieve(self, op, tier_ids, start, end, state_key) -> object:
        return self._inner.submit_retrieve(op, tier_ids, start, end, state_key)

    def submit_store(self, op, tier_ids, start, end, pages, states) -> object:
        return self._inner.submit_store(op, tier_ids, start, end, pages, states)

    def poll(self, ticket: object) -> TierReply | None:
        return self._inner.poll(ticket)


def base_tier(tier: Any) -> Any:
    """The tier under every injector proxy."""
    while isinstance(tier, _TierProxy):
        tier = tier._inner
    return tier


@dataclass
class _Marked:
    """A ticket an injector chose: the wrapped tier's ticket plus the operation."""

    inner: object
    op: OperationId
    proxy: _TierProxy
    seen_reply: bool = False


class _RetrieveFault(Injector):
    """Shared plumbing of faults that hit chosen retrieves' replies."""

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self._count = 0

    def choose(self) -> bool:
        self._count += 1
        return self.trigger.hits(self._count, self.rng)

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        raise NotImplementedError

    def wrap_tier(self, tier: Tier) -> Tier:
        injector = self

        class _Proxy(_TierProxy):
            def submit_retrieve(self, op, tier_ids, start, end, state_key) -> object:
                ticket = self._inner.submit_retrieve(op, tier_ids, start, end, state_key)
                return _Marked(ticket, op, self) if injector.choose() else ticket

            def poll(self, ticket: object) -> TierReply | None:
                if not (isinstance(ticket, _Marked) and ticket.proxy is self):
                    return self._inner.poll(ticket)
                reply = self._inner.poll(ticket.inner)
                if reply is None:
                    return None
                return injector.on_reply(ticket, reply)

        return _Proxy(tier)

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()})"


class LostTierReply(_RetrieveFault):
    """The tier's reply to chosen retrieves (the ``nth`` retrieve of the run, or each
    with probability ``p``) never reaches the worker: the tier did the work, the
    answer is lost on the way back (as when a real LMCache handler raises)."""

    name = "lost_tier_reply"

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        if not marked.seen_reply:
            marked.seen_reply = True
            self.fire(op=marked.op, direction="tier->worker", ok=reply.ok)
        return None


class RetrieveFailure(_RetrieveFault):
    """Chosen retrieves fail: the tier answers ``ok=False`` instead of its data."""

    name = "retrieve_failure"

    def on_reply(self, marked: _Marked, reply: TierReply) -> TierReply | None:
        if not marked.seen_reply:
            marked.seen_reply = True
            self.fire(op=marked.op, would_have_been_ok=reply.ok)
        return TierReply(ok=False, error="injected retrieve failure")


class EvictAfterLookup(Injector):
    """Between a lookup hit and its retrieve, the tier drops one chunk of the range the
    retrieve asks for (someone else's store evicted it): ``chunk`` is the index of the
    dropped chunk within that range (negative counts from its end). Needs a tier with
    ``drop_chunk`` (the in-process tier)."""

    name = "evict_after_lookup"

    def __init__(self, nth: Sequence[int] = (), *, p: float = 0.0, chunk: int = 0, seed: int = 0):
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.chunk = chunk
        self._count = 0

    def wrap_tier(self, tier: Tier) -> Tier:
        if not callable(getattr(base_tier(tier), "drop_chunk", None)):
            raise ValueError(f"{self.name} needs a tier with drop_chunk (the in-process tier)")
        injector = self

        class _Proxy(_TierProxy):
            def submit_retrieve(self, op, tier_ids, start, end, state_key) -> object:
                injector._count += 1
                if injector.trigger.hits(injector._count, injector.rng):
                    injector._evict(self, op, tier_ids, start, end)
                return self._inner.submit_retrieve(op, tier_ids, start, end, state_key)

        return _Proxy(tier)

    def _evict(self, proxy: _TierProxy, op, tier_ids, start: int, end: int) -> None:
        size = proxy.chunk_size
        first, last = start // size, -(-end // size)  # chunks the retrieve reads
        chunks = list(range(first, last))
        if not chunks:
            return
        index = chunks[max(-len(chunks), min(self.chunk, len(chunks) - 1))]
        # drop_chunk keys whole chunks only: hand it the ids of the full chunks.
        ids = tuple(tier_ids[: min(len(tier_ids), (index + 1) * size)])
        if base_tier(proxy).drop_chunk(ids, index):
            self.fire(op=op, chunk=index, tokens=[index * size, (index + 1) * size])

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, chunk={self.chunk})"


class LateVisibility(Injector):
    """Chosen stores are acknowledged ``delay_s`` before their chunks become visible to
    lookups (the real LMCache server's reply comes a few ms before visibility). Uses
    the in-process tier's own ``visibility_delay_s``, so only chunks the store newly
    adds are late, exactly as that tier keys them."""

    name = "late_visibility"

    def __init__(
        self, nth: Sequence[int] = (), *, p: float = 0.0, delay_s: float = 5.0, seed: int = 0
    ):
        super().__init__(seed)
        if delay_s <= 0:
            raise ValueError(f"late_visibility delay_s must be positive, got {delay_s}")
        self.trigger = Trigger(tuple(nth), p)
        self.delay_s = delay_s
        self._count = 0

    def wrap_tier(self, tier: Tier) -> Tier:
        if not hasattr(base_tier(tier), "visibility_delay_s"):
            raise ValueError(
                f"{self.name} needs a tier with visibility_delay_s (the in-process tier)"
            )
        injector = self

        class _Proxy(_TierProxy):
            def submit_store(self, op, tier_ids, start, end, pages, states) -> object:
                ticket = self._inner.submit_store(op, tier_ids, start, end, pages, states)
                injector._count += 1
                if injector.trigger.hits(injector._count, injector.rng):
                    return _Marked(ticket, op, self)
                return ticket

            def poll(self, ticket: object) -> TierReply | None:
                if not (isinstance(ticket, _Marked) and ticket.proxy is self):
                    return self._inner.poll(ticket)
                # The in-process tier writes (and stamps visibility) when a poll first
                # sees the store complete: delay visibility for exactly that poll.
                base = base_tier(self)
                saved = base.visibility_delay_s
                base.visibility_delay_s = saved + injector.delay_s
                try:
                    reply = self._inner.poll(ticket.inner)
                finally:
                    base.visibility_delay_s = saved
                if reply is not None and not ticket.seen_reply:
                    ticket.seen_reply = True
                    if reply.ok:
                        injector.fire(op=ticket.op, delay_s=injector.delay_s)
                return reply

        return _Proxy(tier)

    def describe(self) -> str:
        return f"{self.name}({self.trigger.describe()}, delay_s={self.delay_s:g})"


# -- copy (restore fence) --------------------------------------------------------------


class FenceFailure(Injector):
    """The restore fence raises ``RestoreFenceError`` when the copy of a chosen load is
    enqueued (the ``nth`` load whose copy the worker enqueues, or each with probability
    ``p``). Transient: it raises once and the worker retries at a later poll, keeping
    the submission clock. ``persistent``: it raises at every attempt, so the transfer
    deadline stops the engine."""

    name = "fence_failure"

    def __init__(
        self,
        nth: Sequence[int] = (),
        *,
        p: float = 0.0,
        persistent: bool = False,
        seed: int = 0,
        name: str | None = None,
    ):
        if name is not None:
            self.name = name  # a catalog alias (fence_failure_persistent)
        super().__init__(seed)
        self.trigger = Trigger(tuple(nth), p)
        self.persistent = persistent
        self.raised = 0
        self._count = 0

    def wrap_copy(self, copy: CopyEngine) -> CopyEngine:
        injector = self
        # Per engine build: a restart starts a fresh scheduler whose op ids can recur.
        attempts: dict[OperationId, int] = {}
        chosen: set[OperationId] = set()

        class _Copy:
            def enqueue(self, op, pages, blocks, state, req_id) -> object:
                if op not in attempts:
                    injector._count += 1
                    if injector.trigger.hits(injector._count, injector.rng):
                        chosen.add(op)
                attempts[op] = attempts.get(op, 0) + 1
                if op in chosen and (injector.persistent or attempts[op] == 1):
                    injector.raised += 1
                    if attempts[op] == 1:
                        # One firing per broken load: a persistent fence raises at
                        # every poll, which ``raised`` counts without flooding the trace.
                        injector.fire(op=op, persistent=injector.persistent)
                    raise RestoreFenceError(f"injected fence failure at enqueue of {op}")
                return copy.enqueue(op, pages, blocks, state, req_id)

            def is_complete(self, ticket: object) -> bool:
                return copy.is_complete(ticket)

            def __getattr__(self, name: str) -> Any:
                return getattr(copy, name)

        return _Copy()

    def describe(self) -> str:
        kind = "persistent" if self.persistent else "transient"
        return f"{self.name}({self.trigger.describe()}, {kind})"


# -- configuration and request ids -----------------------------------------------------


class PortZeroIds(Injector):
    """``data_parallel_base_port`` left unresolved: the servers sharing a host start
    with ``ports`` (default 0 for both). Fires when it changes a run's ports; only
    scenarios that assemble servers from ``RunContext.ports`` (``two_servers``) and
    apply configuration faults feel it."""

    name = "port_zero_ids"

    def __init__(self, ports: Sequence[int] = (0, 0), *, seed: int = 0):
        super().__init__(seed)
        ports = tuple(ports)
        if len(ports) != 2 or any(p < 0 for p in ports):
            raise ValueError(f"port_zero_ids wants two ports >= 0, got {list(ports)}")
        self.ports = ports

    def configure(self, ctx: RunContext) -> RunContext:
        if tuple(ctx.ports) == self.ports:
            return ctx
        self.fire(ports=list(self.ports), resolved=list(ctx.ports))
        return dataclasses.replace(ctx, ports=self.ports)

    def describe(self) -> str:
        return f"{self.name}(ports={list(self.ports)})"


class SaltedId(str):
    """A request id whose ``hash`` is salted (blake2b of salt and text): the same text,
    equal to the plain id, but set and dict-bucket order over such ids is a function
    of the salt, not of PYTHONHASHSEED."""

    salted: bool = True

    def __new__(cls, text: str, salt: int) -> SaltedId:
        obj = super().__new__(cls, text)
        digest = hashlib.blake2b(
            str(text).encode(), digest_size=8, key=(salt & (2**64 - 1)).to_bytes(8, "little")
        ).digest()
        obj._hash = int.from_bytes(digest, "little", signed=True)
        return obj

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return str.__ne__(self, other)

    def __reduce__(self):  # plain text on the wire: the salt is a per-process concern
        return (str, (str(self),))


def salted_ids(salt: int) -> Callable[[Request], Request]:
    """A request map giving every request id a hash salted with ``salt``. Stable API:
    the campaign passes it to ``faults.campaign.execute.run_case(request_map=..., replay_map=...)``."""

    def salt_request(req: Request) -> Request:
        return dataclasses.replace(req, req_id=SaltedId(str(req.req_id), salt))

    return salt_request


class HashOrderShuffle(Injector):
    """Iteration order of unordered collections over request ids changes with the run:
    request ids get hashes salted with ``salt`` (drawn from the run's seed when not
    given); the determinism re-run uses ``replay_salt`` (default: a different salt), so
    a stack whose trace depends on hash order shows two digests.

    The salting itself is a request map (``request_map``; the campaign passes it to
    the runner). The injector wraps the completion channel only to observe: it fires
    once per request whose operations reach the channel under a salted id, so a run
    that forgot the map reports this fault as not exercised."""

    name = "hash_order_shuffle"

    def __init__(self, salt: int | None = None, *, replay_salt: int | None = None, seed: int = 0):
        super().__init__(seed)
        self.salt = salt if salt is not None else self.rng.getrandbits(64)
        self.replay_salt = replay_salt if replay_salt is not None else self.salt ^ 0x5A5A_5A5A
        self._seen: set[str] = set()

    def request_map(self) -> Callable[[Request], Request]:
        return salted_ids(self.salt)

    def replay_map(self) -> Callable[[Request], Request]:
        return salted_ids(self.replay_salt)

    def wrap_channel(self, channel: CompletionChannel) -> CompletionChannel:
        injector = self

        class _Channel:
            def put(self, completions: Sequence[Completion]) -> None:
                for c in completions:
                    rid = c.op.req_id
                    # Evidence names the request only: the salt differs between a run
                    # and its replay, and the trace digests must be comparable.
                    if isinstance(rid, SaltedId) and str(rid) not in injector._seen:
                        injector._seen.add(str(rid))
                        injector.fire(req_id=str(rid), salted=True)
                channel.put(completions)

            def take(self) -> list[Completion]:
                return channel.take()

        return _Channel()

    def describe(self) -> str:
        return f"{self.name}(salt={self.salt}, replay_salt={self.replay_salt})"


def wrap_all(injectors: Sequence[Injector]):
    """A ``wrap`` for ``SimWorld.engine`` applying every injector in order."""

    def wrap(role: str, part: Any) -> Any:
        for inj in injectors:
            part = inj.wrap(role, part)
        return part

    return wrap


def configure_all(injectors: Sequence[Injector], ctx: RunContext) -> RunContext:
    """Apply every injector's configuration fault to a run's context, in order."""
    for inj in injectors:
        ctx = inj.configure(ctx)
    return ctx


def arm_crashes(injectors: Sequence[Injector]) -> None:
    """A scenario that restarts a dead engine (catching ``EngineCrash``) arms the
    crash faults of its run."""
    for inj in injectors:
        if isinstance(inj, EngineRestart):
            inj.armed = True
