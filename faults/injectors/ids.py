"""Faults of identities: engines configured with port 0 (ids that collide), and
request ids salted so set iteration order changes (a hash-order shuffle)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Sequence

from kvfault.faults.runs import Injector, RunContext
from kvfault.reference.interfaces import (
    CompletionChannel,
)
from kvfault.reference.types import Completion, Request


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
    _hash: int  # the salted hash, set once by __new__

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

    def __reduce__(self) -> tuple[Any, ...]:  # plain text on the wire: the salt is per process
        return (str, (str(self),))


def salted_ids(salt: int) -> Callable[[Request], Request]:
    """A request map giving every request id a hash salted with ``salt``. Stable API:
    the campaign passes it to ``kvfault.faults.campaign.execute.run_case(request_map=..., replay_map=...)``."""

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
