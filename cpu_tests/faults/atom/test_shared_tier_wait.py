"""The shared-tier stories' wait for lmcache's background write, without an ATOM
checkout: ``AtomRun.stored(..., shared_tier=True)`` asks the server's remote backend
alone, the worker's lookup passes that backend to lmcache, and the worker fault
``slow_remote_write_s`` delays only the remote write (stand-in lmcache objects)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from kvfault.faults.atom.scenarios import SAVE_SETTLE_S, AtomRun
from kvfault.faults.atom.spec import ServerSpec
from kvfault.faults.atom.worker import WorkerProcess
from kvfault.faults.atom.worker_faults import WorkerFaults


class _Server:
    def __init__(self, spec: ServerSpec):
        self.spec = spec
        self.asked: list[tuple[Any, ...]] = []

    def wait_stored(self, tokens: list[int], want: int, limit_s: float, backend: Any) -> bool:
        self.asked.append((len(tokens), want, limit_s, backend))
        return True


def test_a_shared_tier_wait_asks_the_remote_backend_for_the_whole_chunks():
    run = AtomRun(None, 0)  # type: ignore[arg-type]  # no host: the server is a stand-in
    server = _Server(ServerSpec("A", shared_tier=True))
    run.stored(server, tuple(range(200)), shared_tier=True)  # type: ignore[arg-type]
    run.stored(server, tuple(range(200)))  # type: ignore[arg-type]
    assert server.asked == [
        (200, 192, SAVE_SETTLE_S, "RemoteBackend"),
        (200, 192, SAVE_SETTLE_S, None),
    ]


def test_a_shared_tier_wait_on_a_server_without_one_is_refused():
    run = AtomRun(None, 0)  # type: ignore[arg-type]
    server = _Server(ServerSpec("A"))
    with pytest.raises(ValueError, match="A has no shared tier"):
        run.stored(server, tuple(range(200)), shared_tier=True)  # type: ignore[arg-type]
    assert server.asked == []


def test_the_workers_lookup_searches_only_the_backend_asked_for():
    calls: list[dict] = []
    worker = WorkerProcess.__new__(WorkerProcess)
    worker._peek = lambda **kw: calls.append(kw) or 128
    assert worker.stored_tokens([5, 6], "RemoteBackend") == 128
    assert worker.stored_tokens([5, 6]) == 128
    assert calls == [
        {"tokens": [5, 6], "search_range": ["RemoteBackend"], "pin": False},
        {"tokens": [5, 6], "search_range": None, "pin": False},
    ]


def _faults(events: list) -> WorkerFaults:
    faults = WorkerFaults.__new__(WorkerFaults)
    faults.log = SimpleNamespace(record=lambda kind, **fields: events.append((kind, fields)))
    return faults


def test_a_slow_remote_write_waits_before_the_write_itself():
    written: list[tuple[str, float]] = []

    async def put(key: str, memory_obj: Any) -> str:
        written.append((key, asyncio.get_running_loop().time()))
        return "done"

    connection = SimpleNamespace(put=put)
    engine = SimpleNamespace(
        storage_manager=SimpleNamespace(
            storage_backends={"RemoteBackend": SimpleNamespace(connection=connection)}
        )
    )
    events: list = []
    _faults(events)._slow_remote_write(engine, 0.05)

    async def store() -> tuple[float, Any]:
        start = asyncio.get_running_loop().time()
        return start, await connection.put("k", object())

    start, value = asyncio.run(store())
    assert value == "done" and [k for k, _ in written] == ["k"]
    assert written[0][1] - start >= 0.05
    assert events == [("fault", {"injector": "slow_remote_write", "delay": 0.05})]


def test_a_slow_remote_write_without_a_remote_tier_is_refused():
    engine = SimpleNamespace(storage_manager=SimpleNamespace(storage_backends={}))
    with pytest.raises(ValueError, match="needs a server with a shared tier"):
        _faults([])._slow_remote_write(engine, 0.5)
