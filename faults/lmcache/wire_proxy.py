"""A loopback ZMQ proxy between lmcache's client and a real lmcache server, with faults.

lmcache's client is a ZMQ DEALER that sends ``[request_uid, operation, *payloads]`` and
the server is a ROUTER that answers ``[request_uid, operation, *result]`` to the same
peer. ``WireProxy`` binds a ROUTER on ``127.0.0.1`` (clients connect to ``proxy.url``
instead of the server) and opens one DEALER to the server per client, so the server
still sees one peer per client (its per-client thread affinity is kept) and request
uids of different clients never mix.

Faults are data (``WireFault``): an action, the lmcache operation it applies to
(``None`` = any), which message of that operation (0-based index, counted per
operation over all clients; ``None`` = every one) and a probability drawn from the
proxy's seeded RNG. Reply faults act on the server's answer: ``drop`` (never
forwarded), ``delay`` (forwarded ``delay_s`` later), ``duplicate`` (forwarded twice).
Server faults act when the matching *request* arrives, before it is forwarded, so it
is in flight when they fire: ``kill`` (SIGKILL the server and wait for it to die, then
forward the request: the request that triggered it is never answered, however the
machine schedules the two processes) and ``pause`` (SIGSTOP, and SIGCONT ``delay_s``
later when ``delay_s > 0``, else on ``resume_server()``).
Every fault that fires is appended to ``fired`` (and never silently skipped), so a
plan can report which injectors fired.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence

Action = Literal["drop", "delay", "duplicate", "kill", "pause"]
REPLY_ACTIONS = ("drop", "delay", "duplicate")
SERVER_ACTIONS = ("kill", "pause")


class ControllableServer(Protocol):
    @property
    def url(self) -> str: ...

    def kill(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


@dataclass(frozen=True)
class WireFault:
    """One wire fault (see the module docstring)."""

    action: Action
    op: str | None = None
    index: int | None = None
    probability: float = 1.0
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.action not in REPLY_ACTIONS + SERVER_ACTIONS:
            raise ValueError(
                f"unknown wire fault action {self.action!r}; "
                f"choose one of {REPLY_ACTIONS + SERVER_ACTIONS}"
            )
        if self.index is not None and self.index < 0:
            raise ValueError(f"message index must be >= 0, got {self.index}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {self.probability}")
        if self.delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {self.delay_s}")
        if self.action == "delay" and self.delay_s <= 0:
            raise ValueError("a delay fault needs delay_s > 0")


@dataclass(frozen=True)
class FiredFault:
    fault: int  # index into the proxy's faults
    action: Action
    op: str
    index: int  # message index of that operation
    t: float  # monotonic time it fired


@dataclass
class _Client:
    identity: bytes
    backend: Any
    ops: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # uid -> (op, req idx)


def _decode_op(frame: bytes) -> str:
    try:
        from lmcache.v1.multiprocess.transport.zmq_impl.wire import decode_operation

        return str(decode_operation(frame))
    except Exception:
        return "?"


class WireProxy:
    """Start with ``start()`` or ``with``; stop with ``stop()``. Thread-safe to read
    ``fired`` and ``counts`` while it runs."""

    def __init__(
        self,
        server_url: str,
        faults: Sequence[WireFault] = (),
        *,
        seed: int = 0,
        server: ControllableServer | None = None,
    ):
        import zmq

        self._zmq = zmq
        self.server_url = server_url
        self.faults = tuple(faults)
        self.server = server
        if server is None and any(f.action in SERVER_ACTIONS for f in self.faults):
            raise ValueError("kill / pause faults need the server object (server=...)")
        self.rng = random.Random(seed)
        self.fired: list[FiredFault] = []
        self.requests: dict[str, int] = {}  # per-op request counts
        self.replies: dict[str, int] = {}  # per-op reply counts (as sent by the server)
        self._lock = threading.Lock()
        self._ctx = zmq.Context()
        # No send may block the proxy's loop for good (a paused server stops reading):
        # one that cannot go out within a second is dropped, as a lost frame.
        self._ctx.setsockopt(zmq.SNDTIMEO, 1000)
        self._front = self._ctx.socket(zmq.ROUTER)
        self._front.setsockopt(zmq.LINGER, 0)
        port = self._front.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{port}"
        self._clients: dict[bytes, _Client] = {}
        self._by_backend: dict[Any, _Client] = {}
        self._delayed: list[tuple[float, int, Any, list[bytes]]] = []
        self._seq = itertools.count()
        self._resume_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kvfault-wire-proxy", daemon=True)
        self._started = False

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> WireProxy:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop forwarding, close the sockets; resumes a server this proxy paused."""
        self._stop.set()
        if self._started:
            self._thread.join(timeout=10)
        if self._resume_at is not None and self.server is not None:
            self.server.resume()
            self._resume_at = None
        self._ctx.destroy(linger=0)

    def __enter__(self) -> WireProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def resume_server(self) -> None:
        """SIGCONT a server paused by a ``pause`` fault without a timeout."""
        with self._lock:
            self._resume_at = time.monotonic()

    def fired_actions(self) -> list[str]:
        with self._lock:
            return [f.action for f in self.fired]

    # -- fault matching ----------------------------------------------------------------
    def _match(self, actions: tuple[str, ...], op: str, index: int) -> list[int]:
        hits: list[int] = []
        for i, f in enumerate(self.faults):
            if f.action not in actions:
                continue
            if f.op is not None and f.op != op:
                continue
            if f.index is not None and f.index != index:
                continue
            # Draw only for candidate faults, in order: the same seed and traffic give
            # the same decisions.
            if f.probability < 1.0 and self.rng.random() >= f.probability:
                continue
            hits.append(i)
        return hits

    def _record(self, i: int, op: str, index: int) -> None:
        with self._lock:
            self.fired.append(FiredFault(i, self.faults[i].action, op, index, time.monotonic()))

    # -- the loop ------------------------------------------------------------------------
    def _client(self, identity: bytes) -> _Client:
        c = self._clients.get(identity)
        if c is None:
            zmq = self._zmq
            backend = self._ctx.socket(zmq.DEALER)
            backend.setsockopt(zmq.LINGER, 0)
            backend.connect(self.server_url)
            c = _Client(identity, backend)
            self._clients[identity] = c
            self._by_backend[backend] = c
            self._poller.register(backend, zmq.POLLIN)
        return c

    def _loop(self) -> None:
        zmq = self._zmq
        self._poller = zmq.Poller()
        self._poller.register(self._front, zmq.POLLIN)
        while not self._stop.is_set():
            now = time.monotonic()
            timeout_ms = 20
            if self._delayed:
                timeout_ms = max(0, min(timeout_ms, int((self._delayed[0][0] - now) * 1000)))
            try:
                events = dict(self._poller.poll(timeout_ms))
            except zmq.ZMQError:
                break
            if self._front in events:
                self._on_request(self._front.recv_multipart())
            for sock in list(events):
                if sock is not self._front and sock in self._by_backend:
                    self._on_reply(self._by_backend[sock], sock.recv_multipart())
            now = time.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                _, _, _c, frames = heapq.heappop(self._delayed)
                self._send_front(frames)
            with self._lock:
                resume = self._resume_at is not None and self._resume_at <= now
                if resume:
                    self._resume_at = None
            if resume and self.server is not None:
                self.server.resume()

    def _send_front(self, frames: list[bytes]) -> None:
        try:
            self._front.send_multipart(frames)
        except self._zmq.ZMQError:
            pass  # the client went away

    def _on_request(self, frames: list[bytes]) -> None:
        identity, rest = frames[0], frames[1:]
        c = self._client(identity)
        if len(rest) >= 2 and rest[1] != b"":  # b"" operation: stream ack/cancel
            op = _decode_op(rest[1])
            with self._lock:
                index = self.requests.get(op, 0)
                self.requests[op] = index + 1
            c.ops[rest[0]] = (op, index)
            for i in self._match(SERVER_ACTIONS, op, index):
                self._record(i, op, index)
                f = self.faults[i]
                assert self.server is not None
                if f.action == "kill":
                    # Dead first: forwarded before the kill, a request could be answered
                    # while the signal is on its way (seen at load 2: the kill landed one
                    # request later than the fault said).
                    self.server.kill()
                    self._send_back(c, rest)  # in flight to a dead server: never answered
                    return
                self.server.pause()
                if f.delay_s > 0:
                    with self._lock:
                        self._resume_at = time.monotonic() + f.delay_s
        self._send_back(c, rest)

    def _send_back(self, c: _Client, frames: list[bytes]) -> None:
        try:
            c.backend.send_multipart(frames)
        except self._zmq.ZMQError:
            pass  # the server is not reading (paused, gone): the request is lost

    def _on_reply(self, c: _Client, frames: list[bytes]) -> None:
        uid = frames[0] if frames else b""
        op, _req_index = c.ops.pop(uid, ("?", -1))
        with self._lock:
            index = self.replies.get(op, 0)
            self.replies[op] = index + 1
        out = [c.identity, *frames]
        copies, delay = 1, 0.0
        for i in self._match(REPLY_ACTIONS, op, index):
            self._record(i, op, index)
            f = self.faults[i]
            if f.action == "drop":
                copies = 0
            elif f.action == "duplicate":
                copies = max(copies, 2) if copies else 0
            else:
                delay = max(delay, f.delay_s)
        for _ in range(copies):
            if delay > 0:
                heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), c, out))
            else:
                self._send_front(out)
