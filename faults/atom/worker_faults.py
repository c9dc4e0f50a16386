"""The faults a worker process carries (``FaultSpec``): each wraps a collaborator of
ATOM's connector (lmcache's engine, the lookup server) or edits what ``get_finished``
returns, and records a ``fault`` event with its evidence; ATOM's code is untouched."""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Protocol

from kvfault.faults.atom.event_log import EventLog, completion_fields, op_of
from kvfault.faults.atom.spec import FaultSpec, ServerSpec


class _Pages(Protocol):
    def write(self, block: int, value: int) -> None: ...


class ArmedWorker(Protocol):
    """What the faults use of the worker process they are armed in
    (``kvfault.faults.atom.worker.WorkerProcess``, which imports this module)."""

    @property
    def spec(self) -> ServerSpec: ...

    @property
    def host_dir(self) -> str: ...

    @property
    def impl(self) -> Any: ...

    @property
    def engine(self) -> Any: ...

    @property
    def kv(self) -> _Pages: ...

    def op_for(self, kind: str, req_id: Any) -> tuple[str, int, str]: ...


class WorkerFaults:
    """The worker's injected faults (``FaultSpec``), each recorded as a ``fault`` event
    with its evidence. They wrap lmcache's engine and the lookup server (collaborators
    of ATOM's connector) or edit what ``get_finished`` returns; ATOM's code is
    untouched."""

    def __init__(self, spec: FaultSpec, worker: ArmedWorker, log: EventLog):
        self.spec, self.log = spec, log
        self.seen: dict[str, int] = {"load": 0, "save": 0}
        self.held: list[tuple[str, Any]] = []
        self.evict_pending: tuple[Any, int] | None = None
        self.forced: list[Any] = []  # memory objects lmcache's PinMonitor force-unpinned
        engine = worker.engine
        if engine is not None and spec.fail_retrieve:
            self._fail_nth(engine, "retrieve", spec.fail_retrieve)
        if engine is not None and spec.fail_store:
            self._fail_nth(engine, "store", spec.fail_store, worker)
        if engine is not None and spec.corrupt_load:
            self._corrupt_nth(engine, worker, spec.corrupt_load)
        if engine is not None and spec.slow_save_s > 0:
            self._slow(engine, "store", spec.slow_save_s, "slow_save")
        if engine is not None and spec.slow_retrieve_s > 0:
            self._slow(engine, "retrieve", spec.slow_retrieve_s, "slow_retrieve")
        # Set when the worker closes: what a hung retrieve waits for (bounded).
        self.closing = threading.Event()
        if engine is not None and spec.tier_files is not None:
            self._fail_files(engine, worker, *spec.tier_files)
        if engine is not None and spec.hang_retrieve:
            self._hang_nth(engine, "retrieve", spec.hang_retrieve)
        if engine is not None and spec.slow_remote_write_s > 0:
            self._slow_remote_write(engine, spec.slow_remote_write_s)
        if engine is not None and spec.hang_finished:
            self._hang_finished(engine, worker, spec.hang_finished)
        if spec.corrupt_slot:
            self._corrupt_slot_nth(worker.impl, spec.corrupt_slot)
        if spec.fail_slot_put:
            self._refuse_slot_put_nth(worker.impl, spec.fail_slot_put)
        if spec.pin_timeout_s:
            self._observe_force_unpin()
        # Chunks lmcache allocated, by id, until its allocator frees them; held weakly so
        # lmcache's finaliser (TensorMemoryObj.__del__ frees a chunk nobody holds) runs.
        self.allocated: dict[int, weakref.ref[Any]] = {}
        self.dropped_unfreed = 0  # chunks that died unfreed and whose id came back
        self._cpu_pool: Any = None
        if engine is not None and spec.fail_copy_out:
            self._fail_copy_out(engine, spec.fail_copy_out)
        server = getattr(worker.impl, "_lookup_server", None)
        if engine is not None and spec.evict_after_lookup:
            self._evict_after(engine, spec.evict_after_lookup)
        if server is not None and spec.drop_lookup_reply:
            self._drop_reply(server, spec.drop_lookup_reply)
        if server is not None and spec.drop_hit_reply:
            self._drop_hit_reply(server, spec.drop_hit_reply)
        # A socket bound at the lookup path by ``steal_lookup_socket`` (closed with the
        # worker). Wrapped after the dropped reply: the loss comes before that reply.
        self._thief: Any = None
        if server is not None and spec.remove_lookup_socket:
            self._lose_socket(server, spec.remove_lookup_socket, steal=False)
        if server is not None and spec.steal_lookup_socket:
            self._lose_socket(server, spec.steal_lookup_socket, steal=True)

    def _fail_files(self, engine: Any, worker: ArmedWorker, what: str, method: str, n: int) -> None:
        # The tier's files change under lmcache, before its n-th call touches them:
        # what a cleanup, or another process or the file system changing a finished
        # file, leaves for the next read or write.
        from kvfault.faults.atom.server_config import local_disk_dir, shared_tier_dir

        spec = worker.spec
        shared = spec.shared_tier
        where = (
            shared_tier_dir(worker.host_dir) if shared else local_disk_dir(spec, worker.host_dir)
        )
        name = ("remote_tier_" if shared else "disk_") + what
        name += "_at_store" if method == "store" else ""
        inner = getattr(engine, method)
        count = [0]
        log = self.log

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n and what == "chunks_truncated":
                files, sizes = _cut_files(_chunk_paths(engine, *args, **kwargs))
                log.record("fault", injector=name, call=n, files=files, sizes=sizes)
            elif count[0] == n:
                files, sizes = _break_dir(where, what)
                log.record("fault", injector=name, call=n, files=files, sizes=sizes)
            return inner(*args, **kwargs)

        setattr(engine, method, wrapped)

    def _fail_copy_out(self, engine: Any, n: int) -> None:
        # In the tier, lmcache's engine holds ATOM's BlockGPUConnector as its
        # gpu_connector: the method that raises is ATOM's, called by lmcache's store
        # after it allocated the request's chunks in its CPU pool.
        gpu = engine.gpu_connector
        inner_copy = gpu.batched_from_gpu
        storage = engine.storage_manager
        inner_alloc = storage.allocate
        count = [0]
        log, allocated, wrapped_free = self.log, self.allocated, set[int]()

        def copy(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                chunks = len(args[0]) if args else 0
                log.record("fault", injector="copy_out_failure", call=n, allocated=chunks)
                raise RuntimeError("kvfault: injected failure of the GPU-to-host copy")
            return inner_copy(*args, **kwargs)

        def allocate(*args: Any, **kwargs: Any) -> Any:
            obj = inner_alloc(*args, **kwargs)
            parent = getattr(obj, "parent_allocator", None)
            if obj is not None and parent is not None and id(parent) not in wrapped_free:
                wrapped_free.add(id(parent))
                self._observe_frees(parent)
            if obj is not None:
                old = allocated.get(id(obj))
                if old is not None and old() is None:
                    # The chunk this id named died and its allocator never freed it.
                    self.dropped_unfreed += 1
                allocated[id(obj)] = weakref.ref(obj)
            return obj

        gpu.batched_from_gpu = copy
        storage.allocate = allocate
        self._cpu_pool = getattr(storage, "local_cpu_backend", None)

    def _observe_frees(self, allocator: Any) -> None:
        # A chunk leaves the ledger when its allocator frees it: one by one (lmcache's
        # put path and its finaliser) or in a batch (lmcache's CPU-pool eviction).
        allocated = self.allocated
        inner_free = allocator.free

        def free(memory_obj: Any, *a: Any, **k: Any) -> Any:
            allocated.pop(id(memory_obj), None)
            return inner_free(memory_obj, *a, **k)

        allocator.free = free
        inner_batched = getattr(allocator, "batched_free", None)
        if inner_batched is not None:

            def batched_free(memory_objs: Any, *a: Any, **k: Any) -> Any:
                for memory_obj in memory_objs:
                    allocated.pop(id(memory_obj), None)
                return inner_batched(memory_objs, *a, **k)

            allocator.batched_free = batched_free

    def unowned_chunks(self) -> int | None:
        """Chunks lmcache allocated that its allocator has not freed and its CPU pool
        does not hold: still alive elsewhere, or dropped without a free (their bytes
        never return to the pool). The ledger holds chunks weakly, so a chunk nobody
        holds is freed by lmcache's own finaliser and is not counted; None unless
        ``fail_copy_out``."""
        if not self.spec.fail_copy_out:
            return None
        held = getattr(self._cpu_pool, "hot_cache", None) or {}
        owned = {id(v) for v in list(held.values())}
        entries = list(self.allocated.items())
        alive = [(k, ref()) for k, ref in entries]
        return self.dropped_unfreed + sum(1 for k, obj in alive if obj is None or k not in owned)

    def below_zero_pins(self) -> int | None:
        """How many memory objects the PinMonitor force-unpinned now have a pin count
        below zero (an unpin after the forced one; lmcache's ``unpin`` does not guard
        it, and frees the object again); None when no pin timeout is set."""
        if not self.spec.pin_timeout_s:
            return None
        return sum(1 for obj in self.forced if getattr(obj.meta, "pin_count", 0) < 0)

    def forward_delay(self, index: int) -> float:
        if index == 0 and self.spec.slow_first_forward_s > 0:
            self.log.record(
                "fault", injector="slow_first_forward", delay=self.spec.slow_first_forward_s
            )
            return self.spec.slow_first_forward_s
        return 0.0

    def _observe_force_unpin(self) -> None:
        # lmcache's PinMonitor is one per process (this worker's, forked fresh): each
        # object it force-unpins is the fault firing, with the pin count it found.
        from lmcache.v1.pin_monitor import PinMonitor

        inner = PinMonitor._force_unpin_timeout_object
        log, forced = self.log, self.forced

        def observed(monitor: Any, memory_obj: Any, elapsed_time: float) -> Any:
            pins = getattr(getattr(memory_obj, "meta", None), "pin_count", None)
            forced.append(memory_obj)
            log.record("fault", injector="pin_timeout_during_load", pins=pins, after=elapsed_time)
            return inner(monitor, memory_obj, elapsed_time)

        PinMonitor._force_unpin_timeout_object = observed

    def _fail_nth(
        self, engine: Any, method: str, n: int, worker: ArmedWorker | None = None
    ) -> None:
        inner = getattr(engine, method)
        count = [0]
        log = self.log
        name = f"{method}_failure"

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                if worker is None:
                    log.record("fault", injector=name, call=n)
                else:
                    # A failed store names its save: what ATOM then reports finished
                    # is not stored, on this rank at least (``unstored``: the judge's
                    # account of the tier holds none of it for sure).
                    op = worker.op_for("save", kwargs.get("req_id"))
                    log.record("fault", op=op, injector=name, call=n, unstored=True)
                raise RuntimeError(f"kvfault: injected lmcache {method} failure")
            return inner(*args, **kwargs)

        setattr(engine, method, wrapped)

    def _hang_nth(self, engine: Any, method: str, n: int, bound_s: float = 120.0) -> None:
        inner = getattr(engine, method)
        count = [0]
        log, closing = self.log, self.closing

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                log.record("fault", injector="hung_retrieve", call=n)
                closing.wait(bound_s)  # until the worker closes; never past the bound
                raise RuntimeError(f"kvfault: injected lmcache {method} that never answered")
            return inner(*args, **kwargs)

        setattr(engine, method, wrapped)

    def _hang_finished(
        self, engine: Any, worker: ArmedWorker, n: int, bound_s: float = 120.0
    ) -> None:
        # Armed once lmcache's n-th retrieve has returned (a load ATOM's worker has yet
        # to report). The next poll answers with nothing drained, so its fault event
        # reaches the host (a poll that never returns sends nothing back); every later
        # poll never returns. The load is never reported.
        from atom.kv_transfer.disaggregation.types import KVConnectorOutput

        inner_retrieve, impl = engine.retrieve, worker.impl
        inner_finished = impl.get_finished
        count, polls = [0], [0]
        armed = threading.Event()
        log, closing = self.log, self.closing

        def retrieve(*args: Any, **kwargs: Any) -> Any:
            ret = inner_retrieve(*args, **kwargs)
            count[0] += 1
            if count[0] == n:
                armed.set()
            return ret

        def get_finished(*args: Any, **kwargs: Any) -> Any:
            if not armed.is_set():
                return inner_finished(*args, **kwargs)
            polls[0] += 1
            if polls[0] == 1:
                log.record("fault", injector="hung_get_finished", retrieve=n)
                return KVConnectorOutput()
            closing.wait(bound_s)  # until the worker closes; never past the bound
            raise RuntimeError("kvfault: injected get_finished that never answered")

        engine.retrieve = retrieve
        impl.get_finished = get_finished

    def _slow(self, engine: Any, method: str, delay_s: float, name: str) -> None:
        # The wait comes before lmcache touches the KV blocks: what ATOM's scheduler does
        # with those blocks meanwhile is what the row judges.
        inner = getattr(engine, method)
        log = self.log

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            log.record("fault", injector=name, delay=delay_s, req=kwargs.get("req_id"))
            time.sleep(delay_s)
            return inner(*args, **kwargs)

        setattr(engine, method, wrapped)

    def _slow_remote_write(self, engine: Any, delay_s: float) -> None:
        # lmcache's remote backend writes each chunk on its own event loop after the
        # store returned (RemoteBackend.submit_put_task); the wait delays that write
        # only, as a slow share does, not the store ATOM waits for.
        backend = engine.storage_manager.storage_backends.get("RemoteBackend")
        connection = getattr(backend, "connection", None)
        if connection is None:
            raise ValueError("slow_remote_write_s needs a server with a shared tier")
        inner = connection.put
        log = self.log

        async def put(key: Any, memory_obj: Any) -> Any:
            import asyncio

            log.record("fault", injector="slow_remote_write", delay=delay_s)
            await asyncio.sleep(delay_s)
            return await inner(key, memory_obj)

        connection.put = put

    def _corrupt_nth(self, engine: Any, worker: ArmedWorker, n: int) -> None:
        # After the n-th retrieve, the first block it wrote holds other bytes: what a
        # wrong unpack or a stale tier entry would leave.
        inner = engine.retrieve
        count = [0]
        log = self.log

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            ret = inner(*args, **kwargs)
            count[0] += 1
            mask, blocks = kwargs.get("mask"), kwargs.get("block_ids")
            if count[0] == n and mask is not None and blocks:
                first = int(mask.int().argmax()) // worker.spec.block_size
                worker.kv.write(blocks[first], 0x0BAD)
                log.record("fault", injector="corrupt_load", block=blocks[first])
            return ret

        engine.retrieve = wrapped

    def _evict_after(self, engine: Any, n: int) -> None:
        # The eviction waits for the worker's next call from the scheduler (the step
        # that dispatches the load): inside the lookup it would stall the lookup server.
        # Only the scheduler's lookups count (lmcache's lookup server asks with
        # ``pin=True``): ATOM's DSV4 worker also looks its own saves up, unpinned, to
        # see them published (``_page_boundary_visible``).
        inner = engine.lookup
        count = [0]

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            hit = inner(*args, **kwargs)
            if hit and kwargs.get("pin"):
                count[0] += 1
                if count[0] == n:
                    self.evict_pending = (engine, int(hit))
            return hit

        engine.lookup = wrapped

    def _refuse_slot_put_nth(self, impl: Any, n: int) -> None:
        """The n-th SLOT sidecar ATOM's hybrid connector puts into its store is refused
        (``DSV4CheckpointStore.put`` answers False, storing nothing)."""
        store = getattr(impl, "_slot_store", None)
        inner = getattr(store, "put", None)
        if inner is None:
            return
        count, log = [0], self.log

        def put(key: Any, blob: Any, *args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                log.record("fault", injector="slot_put_refused", call=n)
                return False
            return inner(key, blob, *args, **kwargs)

        setattr(store, "put", put)  # noqa: B010  wraps ATOM's method

    def _corrupt_slot_nth(self, impl: Any, n: int) -> None:
        """The n-th SLOT sidecar ATOM's hybrid connector borrows from its store (its
        ``DSV4CheckpointStore.borrow``, what a SLOT load reads) is handed over as a
        copy whose last byte is flipped."""
        store = getattr(impl, "_slot_store", None)
        inner = getattr(store, "borrow", None)
        if inner is None:
            return
        from contextlib import contextmanager

        count, log = [0], self.log

        @contextmanager
        def borrowed(key: Any) -> Any:
            with inner(key) as blob:
                if blob is None:
                    yield blob
                    return
                count[0] += 1
                if count[0] != n:
                    yield blob
                    return
                bad = blob.clone()
                bad[-1] ^= 0xFF
                log.record("fault", injector="corrupt_slot", call=n)
                yield bad

        setattr(store, "borrow", borrowed)  # noqa: B010  wraps ATOM's method

    def before_call(self) -> None:
        """Run an eviction armed by a lookup (``evict_after_lookup``): every key
        lmcache's storage backends hold is removed through its storage manager's
        ``batched_remove`` (a forced remove, which also drops the pins the lookup just
        took). Not lmcache's ``clear``: it skips pinned chunks, so it never evicted the
        chunks the lookup had pinned, and its token count raises ``IndexError`` on the
        raw-byte chunks ATOM's DSV4 connector stores."""
        pending, self.evict_pending = self.evict_pending, None
        if pending is not None:
            engine, hit = pending
            manager = engine.storage_manager
            keys: dict[Any, None] = {}
            for backend in list(manager.storage_backends.values()):
                for key in getattr(backend, "get_keys", list)():
                    keys[key] = None
            removed = manager.batched_remove(list(keys))
            self.log.record("fault", injector="evict_after_lookup", hit=hit, removed=removed)

    def _drop_reply(self, server: Any, n: int) -> None:
        transport = server.transport
        inner = transport.send_response
        count = [0]
        log = self.log

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                log.record("fault", injector="lost_lookup_reply", reply=n)
                return None
            return inner(*args, **kwargs)

        transport.send_response = wrapped

    def _lose_socket(self, server: Any, n: int, steal: bool) -> None:
        # The path goes (or another socket takes it) while the worker's lookup server
        # runs on: its bound socket and connections made before still work, as they do
        # for a Unix socket whose path is unlinked or rebound.
        transport = server.transport
        path = str(getattr(transport, "socket_path", "") or "")
        inner = transport.send_response
        count = [0]
        name = "lookup_socket_stolen" if steal else "lookup_socket_removed"

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n and path:
                if steal:
                    self._thief = _silent_socket(path)
                else:
                    os.unlink(path)
                self.log.record("fault", injector=name, lookup=n, path=os.path.basename(path))
            return inner(*args, **kwargs)

        transport.send_response = wrapped

    def close(self) -> None:
        """Release what the faults hold: a hung retrieve gives up, a stolen path's
        socket is closed."""
        self.closing.set()
        thief, self._thief = self._thief, None
        if thief is not None:
            sock, ctx = thief
            sock.close(linger=0)
            ctx.term()

    def _drop_hit_reply(self, server: Any, n: int) -> None:
        # The reply carries the hit (lmcache's lookup server sends it as 4 big-endian
        # bytes); the lookup that found chunks has pinned them by then.
        transport = server.transport
        inner = transport.send_response
        count = [0]
        log = self.log

        def wrapped(identity: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
            hit = int.from_bytes(bytes(response), "big") if response else 0
            if hit > 0:
                count[0] += 1
                if count[0] == n:
                    log.record("fault", injector="lost_hit_reply", reply=n, hit=hit)
                    return None
            return inner(identity, response, *args, **kwargs)

        transport.send_response = wrapped

    def finished(self, out: Any, names: dict[Any, str]) -> Any:
        """Duplicate the n-th reported completion of a kind."""
        for attr, kind, _ in completion_fields(out):
            values = getattr(out, attr, None)
            if not values:
                continue
            for value in sorted(values, key=repr):
                self.seen[kind] += 1
                nth = self.seen[kind]
                if self.spec.duplicate_finished == (kind, nth):
                    self.held.append((attr, value))
                    self.log.record(
                        "fault",
                        op=op_of(value, kind, names),
                        injector="duplicate_completion",
                        nth=nth,
                    )
                    return out
        # A duplicate goes out again in the poll after the one that first carried it.
        for attr, value in self.held[:]:
            if value not in getattr(out, attr):
                getattr(out, attr).add(value)
                self.held.remove((attr, value))
        return out


def _silent_socket(path: str) -> tuple[Any, Any]:
    """A ZMQ socket of its own context bound at ``path`` (ipc) that never reads: what a
    stale or foreign process bound there is to a client that connects anew. Returns
    ``(socket, context)``."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind("ipc://" + path)
    return sock, ctx


def _chunk_paths(engine: Any, tokens: Any, mask: Any = None, **_: Any) -> list[str]:
    """The local disk files of the chunks an lmcache ``retrieve(tokens, mask)`` asks
    for, named as lmcache's own local disk backend names them."""
    disk = engine.storage_manager.storage_backends["LocalDiskBackend"]
    chunks = engine.token_database.process_tokens(tokens=tokens, mask=mask)
    return [disk._key_to_path(key) for _, _, key in chunks]


def _cut_files(paths: list[str]) -> tuple[int, list[int]]:
    """Cut each of ``paths`` that is a file to half its bytes; how many were, and the
    size of each before, smallest first."""
    files = [f for f in paths if os.path.isfile(f)]
    sizes = sorted(os.path.getsize(f) for f in files)
    for f in files:
        os.truncate(f, os.path.getsize(f) // 2)
    return len(files), sizes


def _break_dir(path: str, what: str) -> tuple[int, list[int]]:
    """Remove ``path`` (``"removed"``) or cut each file in it to half its bytes
    (``"truncated"``); how many entries it held, and the size of each file among them
    before, smallest first (which says what they were: a hybrid row's PAGE chunks and
    SLOT sidecars differ in size)."""
    import shutil

    names = sorted(os.listdir(path)) if os.path.isdir(path) else []
    files = [f for f in (os.path.join(path, name) for name in names) if os.path.isfile(f)]
    sizes = sorted(os.path.getsize(f) for f in files)
    if what == "removed":
        shutil.rmtree(path, ignore_errors=True)
        return len(names), sizes
    return len(names), _cut_files(files)[1]
