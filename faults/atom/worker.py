"""A worker process of one ATOM server: ATOM's model-runner side for one TP rank (the
offload connector's worker half, a real lmcache engine, its ZMQ lookup server where
ATOM starts one (rank 0), and the fake forward writing page fingerprints into the
rank's shard of ATOM's KV tensors).

Runs only inside server processes (``kvfault.faults.atom.zygote`` forks them). ATOM is imported
from the checkout on ``sys.path``; what is faked is listed in ``kvfault.faults.atom.boundary``.
Its injected faults are ``kvfault.faults.atom.worker_faults.WorkerFaults``.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

from kvfault.faults.atom.event_log import EventLog, completion_fields, op_of
from kvfault.faults.atom.server_config import atom_config, use_lmcache_env
from kvfault.faults.atom.spec import ServerSpec
from kvfault.faults.atom.worker_faults import WorkerFaults
from kvfault.reference.stack.worker import page_digest

# What a block ATOM freed (or took fresh) holds until a forward or a load writes it:
# a page no prompt's fingerprint is, so a load reported done that wrote nothing reads
# back wrong instead of the pages its request left there.
POISON = 0x5EA1_DEAD_0FF1_CE


def layer_salt(layer: int) -> int:
    """What a page's fingerprint is xored with in the model's layer ``layer`` (0 for the
    first): two layers' bytes of one page differ, so a pipeline stage that restored
    another stage's layers reads back other pages."""
    return layer * 0x1F2E_3D4C_5B6A


class HostKv:
    """``kvfault.reference.interfaces.KvPages`` over ATOM's KV tensors: a page's fingerprint is
    written into every segment of its block (first 8 bytes of each), xored with the
    segment's layer salt (``layers``: each segment's model layer), so a restore that
    moved any segment wrong reads back as a different page."""

    def __init__(self, segments: list[Any], layers: list[int] | None = None):
        import torch

        self._views = [s.view(s.shape[0], -1).view(torch.int64) for s in segments]
        self._salts = [layer_salt(n) for n in (layers or [0] * len(segments))]
        self.num_blocks = int(segments[0].shape[0]) if segments else 0

    def read(self, block: int) -> int | None:
        values = {int(v[block, 0]) ^ s for v, s in zip(self._views, self._salts, strict=True)}
        if len(values) == 1:
            return values.pop()
        return hash(tuple(sorted(values)))

    def write(self, block: int, value: int) -> None:
        for v, s in zip(self._views, self._salts, strict=True):
            v[block, :] = value ^ s

    def read_state(self, req_id: str) -> int | None:
        return None

    def write_state(self, req_id: str, state: Any | None) -> None:
        pass  # dense models only: no state slot


def _require_remote_tier(engine: Any) -> None:
    """Raise unless ``engine`` (lmcache's) has its remote tier connected. lmcache builds
    the connector once, when the engine starts, and on a failure logs a warning and
    runs on without it (its remote backend's ``contains`` then answers False and its
    puts go nowhere): a shared-tier row on such a server would pass without a shared
    tier. lmcache 0.5.6's remote connectors refuse a chunk that is not a whole number
    of bytes per token (``base_connector.py``'s assert), for one."""
    backends = getattr(getattr(engine, "storage_manager", None), "storage_backends", {})
    remote = backends.get("RemoteBackend")
    if remote is None or getattr(remote, "connection", None) is None:
        raise RuntimeError(
            "lmcache's remote tier did not connect (its log says why); "
            f"backends: {sorted(backends)}"
        )


class WorkerProcess:
    """ATOM's model-runner side for TP rank ``rank``: the offload connector's worker
    half with a real lmcache engine (and lookup server, where ATOM starts one), and the
    fake forward over the rank's shard of the KV heads.

    Rank 0 records what the judge reads of the server's worker side; another rank
    records its own loads and stores (``sent``, ``retrieve_terminal``, ``copy_complete``,
    its faults), each with its ``rank``, and not what would count one operation twice
    (its completion reports, its forwards: the scheduler's aggregate is one report)."""

    def __init__(
        self, spec: ServerSpec, log: EventLog, socket_dir: str, instance_id: str, rank: int = 0
    ):
        from kvfault.faults.atom import boundary

        use_lmcache_env(spec, os.path.dirname(socket_dir))
        boundary.install_all(socket_dir)
        # ``rank`` is the worker's index: its TP rank within pipeline stage ``stage``.
        stage, tp_rank = divmod(rank, spec.tp_size)
        boundary.set_tp_rank(tp_rank, spec.tp_size)
        self.rank, self.lead = rank, rank == 0
        if rank:
            log.tags = {"rank": rank}
        kernels = boundary.install_kernels()

        from kvfault.fakes.model import DeterministicModel
        from kvfault.reference.types import Geometry

        self.spec, self.log = spec, log
        self.kv: Any = None
        self.host_dir = os.path.dirname(socket_dir)
        self.config = atom_config(spec, stage, instance_id)
        self.stage = stage
        self.hybrid = spec.layout == "hybrid"
        self.model = DeterministicModel(
            "hybrid" if self.hybrid else "dense",
            Geometry(block_size=spec.block_size, chunk_size=spec.chunk_size),
        )
        from kvfault.faults.atom.fixes import fixes

        for fix in fixes(spec.fixes):
            fix.before_build("worker")
        if self.hybrid:
            self._start_hybrid()
        else:
            self._start_dense(kernels)
        self.impl = getattr(self.connector, "_impl", self.connector)
        self.engine = getattr(self.impl, "_engine", None)
        if spec.shared_tier:
            _require_remote_tier(self.engine)
        # The tier's own reads of what lmcache holds use its lookup as it is, before a
        # fault wraps it (they are no lookup of ATOM's: no fault may count them).
        self._peek = getattr(self.engine, "lookup", None)
        # What each of lmcache's retrieves returned (its ret_mask over the range ATOM
        # asked for), by ATOM's request id: observed inside the faults, so it is what
        # the real engine answered.
        self.retrieved: dict[str, tuple[int, int]] = {}
        self._observe_retrieve()
        self.names: dict[Any, str] = {}  # ATOM's request ids -> the story's (last poll's)
        for method in ("store", "retrieve"):
            self._observe_keys(method)
        self.jitter = _Jitter(spec.schedule)
        self.kv_work = _KvWork(self.impl)
        if spec.schedule and self.engine is not None:
            for method in ("store", "retrieve"):
                self.jitter.wrap(self.engine, method)
        from kvfault.faults.atom.spec import FaultSpec

        mine = spec.faults.rank in (-1, rank)  # a fault of one rank's only
        self.faults = WorkerFaults(spec.faults if mine else FaultSpec(), self, log)
        self._observe_sidecars()  # outside the faults: it sees the puts they let through
        self.outputs: dict[str, tuple[int, ...]] = {}
        self.loads: dict[Any, tuple[list[int], int, int]] = {}
        self.saves: dict[Any, list[int]] = {}  # save in flight -> its token ids
        self.forwards = 0
        server = getattr(self.impl, "_lookup_server", None)
        self.socket = _server_socket(server)
        if self.socket:
            log.record("bind", server=spec.name, path=self._socket_name())

    def _start_dense(self, kernels: Any) -> None:
        """ATOM's dense connector on per-layer K and V tensors (this rank's heads)."""
        import torch

        from kvfault.faults.atom import boundary

        # This rank's shard of the KV heads (ATOM splits KV heads across TP ranks).
        shape = (
            self.spec.num_blocks,
            self.spec.block_size,
            max(1, self.spec.kv_heads // self.spec.tp_size),
            self.spec.head_dim,
        )
        # The KV tensors in the dtype ATOM's table gives the server's KV cache dtype.
        dtype = boundary.kv_dtype(self.spec.kv_cache_dtype)
        # The stage's layers of the model's, split as ATOM's model builder splits them.
        first, end = stage_layers(self.spec.layers, self.stage, self.spec.pp_size)
        layers = {
            f"layers.{i}": SimpleNamespace(
                k_cache=torch.zeros(shape, dtype=dtype),
                v_cache=torch.zeros(shape, dtype=dtype),
            )
            for i in range(first, end)
        }
        self.kv = HostKv(
            [t for layer in layers.values() for t in (layer.k_cache, layer.v_cache)],
            [i for i in range(first, end) for _ in range(2)],
        )
        self.connector = _create_connector(self.config, "worker")
        self.connector.register_kv_caches(layers, None, self.spec.num_blocks)
        if not boundary.place_on_host_device(self.connector, kernels):
            raise RuntimeError("this ATOM's offload worker has no codec/GPU connector to place")

    def _start_hybrid(self) -> None:
        """ATOM's hybrid (DSV4) connector on the pools and regions ATOM's own DSV4
        builder allocates and describes (``dsv4_runner``), under the hybrid fakes
        (``dsv4_boundary``)."""
        from kvfault.faults.atom import dsv4_boundary

        dsv4_boundary.install()
        from kvfault.faults.atom.dsv4_kv import Dsv4Kv
        from kvfault.faults.atom.dsv4_runner import Dsv4Pools

        self.pools = Dsv4Pools(
            self.config, num_blocks=self.spec.num_blocks, num_slots=self.spec.max_num_seqs
        )
        self.kv = Dsv4Kv(self.pools.builder)
        self.connector = _create_connector(self.config, "worker")
        self.connector.register_kv_caches({}, self.pools.transfer, self.pools.num_blocks)
        dsv4_boundary.place_on_host(self.connector)

    def _observe_retrieve(self) -> None:
        engine = self.engine
        inner = getattr(engine, "retrieve", None)
        if engine is None or inner is None:
            return
        retrieved = self.retrieved

        def observed(*args: Any, **kwargs: Any) -> Any:
            ret = inner(*args, **kwargs)
            mask = kwargs.get("mask")
            try:
                asked = int(mask.sum()) if mask is not None else int(ret.numel())
                got = int((ret.bool() & mask).sum()) if mask is not None else int(ret.sum())
            except (AttributeError, TypeError, RuntimeError):
                return ret  # an answer this tier cannot read: record nothing
            retrieved[str(kwargs.get("req_id"))] = (got, asked)
            return ret

        engine.retrieve = observed

    def _observe_sidecars(self) -> None:
        """Record (``sidecar``) each SLOT sidecar ATOM's hybrid connector puts into
        lmcache and lmcache takes (its ``DSV4CheckpointStore.put`` answers True): the
        save it belongs to and the boundary it restores (the save's
        ``slot_save_spec``). The lead rank's only, the engine whose holdings the save
        reports' ``stored`` read too. ``efficiency`` counts a hybrid hit loadable only
        at a boundary whose sidecar lmcache took, whatever ATOM's scheduler committed."""
        impl = self.impl
        store = getattr(impl, "_slot_store", None)
        put, save = getattr(store, "put", None), getattr(impl, "_do_save_req", None)
        if put is None or save is None or not self.lead:
            return
        import threading

        saving = threading.local()  # the save a put belongs to, on its save thread

        def save_req(req: Any, *args: Any, **kwargs: Any) -> Any:
            saving.req = req
            try:
                return save(req, *args, **kwargs)
            finally:
                saving.req = None

        def observed(key: Any, blob: Any, *args: Any, **kwargs: Any) -> Any:
            ok = put(key, blob, *args, **kwargs)
            req: Any = getattr(saving, "req", None)
            spec = getattr(req, "slot_save_spec", None)
            if ok and spec is not None:
                self.log.record(
                    "sidecar",
                    op=self.op_for("save", req.req_id),
                    boundary=int(spec.boundary_tokens),
                )
            return ok

        setattr(impl, "_do_save_req", save_req)  # noqa: B010  wraps ATOM's method
        setattr(store, "put", observed)  # noqa: B010  wraps ATOM's method

    def _observe_keys(self, method: str) -> None:
        """Record (``sent``) the keys lmcache's engine in this worker files each store
        and retrieve under: its own ``CacheEngineKey`` of the first and the last whole
        chunk sent, namespace (ATOM's page namespace), world size, worker id and KV
        dtype included. ``keys`` judges them: one content, one key, wherever sent, and
        no key shared by two media."""
        engine = self.engine
        inner = getattr(engine, method, None)
        tdb = getattr(engine, "token_database", None)
        if engine is None or inner is None or tdb is None:
            return

        def observed(tokens: Any, *args: Any, **kwargs: Any) -> Any:
            self._sent(method, tdb, tokens, kwargs.get("req_id"))
            return inner(tokens, *args, **kwargs)

        setattr(engine, method, observed)

    def _sent(self, what: str, tdb: Any, tokens: Any, req_id: Any) -> None:
        chunk = self.spec.chunk_size
        try:
            keys = [
                (end, key)
                for start, end, key in tdb.process_tokens(tokens=tokens)
                if end - start == chunk
            ]
        except Exception:  # noqa: BLE001  a key lmcache cannot make: it files nothing
            keys = []
        if not keys:
            return
        self.log.record(
            "sent",
            op=self.op_for("save" if what == "store" else "load", req_id),
            what=what,
            end=keys[-1][0],
            first=_key_text(keys[0][1]),
            last=_key_text(keys[-1][1]),
        )

    def op_for(self, kind: str, req_id: Any) -> tuple[str, int, str]:
        """The trace operation of the save or load in flight that ATOM's connector
        handed lmcache under ``req_id`` (its ``req_id`` argument)."""
        live = self.saves if kind == "save" else self.loads
        value = next((v for v in live if str(getattr(v, "req_id", v)) == str(req_id)), req_id)
        return op_of(value, kind, {**self.names, **{str(k): n for k, n in self.names.items()}})

    def _socket_name(self) -> str:
        """The lookup socket as the judge tells sockets apart: its name, under its
        machine's name for a server on another machine (another /tmp/vllm_rpc)."""
        name = os.path.basename(self.socket or "")
        return f"{self.spec.machine}:{name}" if self.spec.machine else name

    # ATOM's model-runner calls, as its process manager sends them
    def process_kvconnector_output(self, meta: Any, names: dict[Any, str] | None = None) -> None:
        if names is not None:
            self.names = dict(names)
        self.faults.before_call()
        for req in getattr(meta, "requests", ()) or ():
            if getattr(req, "save_spec", None) is not None:
                key = getattr(req, "save_operation", None) or req.req_id
                self.saves[key] = [int(t) for t in req.token_ids]
            ls = getattr(req, "load_spec", None)
            if ls is not None:
                key = getattr(req, "load_operation", None) or req.req_id
                self.loads[key] = (
                    list(req.block_ids),
                    int(ls.hbm_cached_tokens),
                    int(ls.lmcache_cached_tokens),
                )
        self.connector.start_load_kv(meta)

    def forward(
        self, items: list[tuple], names: dict[int, str], state_ops: Any = None
    ) -> list[int]:
        """Compute each scheduled range into the KV blocks and sample one token each:
        ``items`` are ``(seq_id, req, start, end, blocks, k, group)``; ``k`` is the
        index of the token to sample (the prompt's ``k``-th output), -1 for a middle
        chunk; ``group`` the request's state group (hybrid models; -1 for none).
        ``state_ops``: the batch's state moves (ATOM's ``StateMaintenanceOps``), run
        first, as ATOM's DSV4 metadata builder runs them before the forward."""
        if state_ops is not None:
            from kvfault.faults.atom.dsv4_state_copy import run_state_ops

            run_state_ops(self.pools.builder, state_ops)
        delay = self.faults.forward_delay(self.forwards)
        tokens = []
        num = sum(item[3] - item[2] for item in items)
        if self.lead:
            self.log.record("forward_start", index=self.forwards, tokens=num, duration=delay)
        if delay:
            time.sleep(delay)
        self.jitter.wait()
        for _seq_id, req, start, end, blocks, k, group in items:
            if self.hybrid:
                self.kv.groups[req.req_id] = group
            if end > start:
                self.model.compute(self.kv, req, blocks, start, end)
            if k < 0:
                tokens.append(0)
                continue
            if k == 0:
                self.outputs[req.req_id] = self.model.output(self.kv, req, blocks)
            out = self.outputs[req.req_id]
            # Past the last output: the forward a deferred runner runs to surface the
            # last token samples one more, which nothing reads.
            tokens.append(out[k] if k < len(out) else 0)
        if self.lead:
            self.log.record("forward_end", index=self.forwards)
        self.forwards += 1
        return tokens

    def _retrieve_terminal(self, value: Any, op: Any, outcome: str) -> None:
        """The load's end as ATOM's worker reports it (``ok``), with what lmcache's
        retrieve returned for it (``retrieved`` of ``asked`` tokens; absent when no
        retrieve ran: a load ATOM failed or finished without one). ``load_failures``
        judges a failed load of data the tier holds."""
        got = self.retrieved.pop(str(getattr(value, "req_id", value)), None)
        extra: dict[str, Any] = {} if got is None else {"retrieved": got[0], "asked": got[1]}
        said = "no retrieve ran" if got is None else f"lmcache returned {got[0]} of {got[1]}"
        error = None if outcome == "finished" else f"ATOM reported the load failed; {said}"
        self.log.record("retrieve_terminal", op=op, ok=outcome == "finished", error=error, **extra)

    def poison(self, blocks: list[int]) -> None:
        """Fill ``blocks`` with the sentinel page: ATOM freed them, or took them fresh
        for content not computed or loaded yet."""
        for b in blocks:
            self.kv.write(b, POISON)

    def poison_slots(self, groups: list[int]) -> None:
        """Fill the SLOT of each state group with the sentinel state: ATOM gave the
        group to a request whose state is not computed or loaded yet."""
        from kvfault.faults.atom.dsv4_kv import POISON_STATE

        for g in groups:
            self.kv.write_group(g, POISON_STATE)

    def lookup_pins(self) -> int | None:
        """Lookups whose chunks the lmcache engine still pins (a lookup pins what it
        found until the connector unpins it), or None when this engine keeps no such
        record (then the quiescent record leaves the field out rather than say 0)."""
        pins = getattr(self.engine, "lookup_pins", None)
        if not isinstance(pins, dict):
            return None
        return sum(1 for held in pins.values() if held)

    def unowned_chunks(self) -> int | None:
        """``WorkerFaults.unowned_chunks`` (None: no copy failure injected)."""
        return self.faults.unowned_chunks()

    def below_zero_pins(self) -> int | None:
        """``WorkerFaults.below_zero_pins`` (None: no pin timeout injected)."""
        return self.faults.below_zero_pins()

    def stored_tokens(self, tokens: list[int], backend: str | None = None) -> int | None:
        """How many of ``tokens``, from the start, the lmcache engine holds (a lookup
        that pins nothing), or None when this engine cannot say. With ``backend`` (a
        name of lmcache's storage backends: ``RemoteBackend``), only what that backend
        holds."""
        if self._peek is None:
            return None
        where = [backend] if backend else None
        return int(self._peek(tokens=list(tokens), search_range=where, pin=False))

    def kv_work_pending(self) -> int | None:
        """ATOM's saves and loads handed to this worker's KV threads and not yet done,
        or None when this ATOM has no such threads to count."""
        return self.kv_work.pending if self.kv_work.counted else None

    def resident_prefix(self, req: Any, blocks: list[int]) -> int:
        """Tokens of ``req``'s prompt, in whole blocks from its start, whose pages (as a
        cold run computes them) some block of ``blocks`` holds: the prefix HBM still has
        that no live request owns (on a hybrid model, up to a boundary whose state it
        holds too). The model's own fingerprints, not ATOM's index."""
        have = {self.kv.read(b) for b in blocks}
        n = 0
        for page in self.model.cold_pages(req)[: req.prompt_len // self.spec.block_size]:
            if page not in have:
                break
            n += 1
        bs = self.spec.block_size
        if self.hybrid:
            # A DSV4 request resumes only where its state is kept too: an image of the
            # state at that boundary in some unit of ``blocks`` (ATOM's paged state
            # checkpoints; a unit given back is poisoned, so a stale image is none).
            images = self.kv.image_heads(blocks)
            while n and self.model.cold_state_at(req, n * bs) not in images:
                n -= 1
        return n * bs

    def async_proc_aggregation(self, names: dict[Any, str]) -> Any:
        self.names = dict(names)
        out = self.connector.get_finished()
        for attr, kind, outcome in completion_fields(out):
            for value in getattr(out, attr, ()) or ():
                op = op_of(value, kind, names)
                load = self.loads.pop(value, None) if kind == "load" else None
                if kind == "load":
                    self._retrieve_terminal(value, op, outcome)
                if load is not None and outcome == "finished":
                    # What the load left in HBM, page by page, for the judge to compare
                    # with recompute (correctness).
                    blocks, start, end = load
                    bs = self.spec.block_size
                    pages = [self.kv.read(b) for b in blocks[start // bs : end // bs]]
                    self.log.record("copy_complete", op=op, digest=page_digest(pages))
                tokens = self.saves.pop(value, None) if kind == "save" else None
                if not self.lead:
                    continue  # one report per operation: the aggregate, as rank 0's
                if tokens is not None:
                    # ATOM's contract: a finished save means its blocks may be freed,
                    # not that the data is stored (a failed store is reported finished
                    # too). What the tier holds is lmcache's own answer, read now.
                    stored = self.stored_tokens(tokens)
                    if stored is not None:
                        self.log.record("finished_reported", op=op, outcome=outcome, stored=stored)
                        continue
                self.log.record("finished_reported", op=op, outcome=outcome)
        # Faults act on the way to the scheduler: a dropped completion was reported.
        return self.faults.finished(out, names)

    def close(self, drain_s: float = 5.0) -> None:
        """What the worker holds, let go on its way out: the process exits (``os._exit``)
        as soon as this returns, which closes the lookup socket with it. ATOM's KV
        threads get at most ``drain_s`` to finish what they were handed first."""
        self.faults.close()  # a hung retrieve gives up: the process exits next
        # A load queued behind a hung one runs once the hang gives up; lmcache's close
        # frees the pool it copies from, so let it end first (the worker died of it).
        deadline = time.monotonic() + drain_s
        while self.kv_work.counted and self.kv_work.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.socket:
            self.log.record("unbind", server=self.spec.name, path=self._socket_name())
        server = getattr(self.impl, "_lookup_server", None)
        if server is not None:
            # lmcache's LMCacheLookupServer.close joins a thread that notices only at its
            # socket's 1 s receive timeout, a second of every server's close spent
            # waiting; its socket may not be closed from another thread meanwhile. Stop
            # its loop and let the exit close the socket.
            server.running = False
        close = getattr(self.engine, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # best effort: the process exits next
                pass


class _KvWork:
    """ATOM's saves and loads handed to its worker's KV threads (the connector's
    ``_save_executor`` and ``_load_executor``) and not yet done, counted through the
    executors' ``submit``, so a task queued behind another counts too. Counting only:
    each task runs as ATOM submitted it."""

    def __init__(self, impl: Any):
        import threading

        self._lock = threading.Lock()
        self.pending = 0
        executors = [getattr(impl, n, None) for n in ("_save_executor", "_load_executor")]
        self.counted = all(e is not None for e in executors)
        if self.counted:
            for executor in executors:
                self._count(executor)

    def _count(self, executor: Any) -> None:
        inner = executor.submit

        def submit(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.pending += 1
            try:
                future = inner(*args, **kwargs)
            except BaseException:
                self._done(None)
                raise
            future.add_done_callback(self._done)
            return future

        executor.submit = submit

    def _done(self, _future: Any) -> None:
        with self._lock:
            self.pending -= 1


class _Jitter:
    """A schedule's waits: before each wrapped call, up to ``MAX_S`` drawn from the
    schedule's own generator (schedule 0: none). ATOM's save and load threads draw from
    it too, so a lock keeps the generator whole."""

    MAX_S = 0.03

    def __init__(self, schedule: int):
        import random
        import threading

        self.on = schedule > 0
        self._rng = random.Random(schedule)
        self._lock = threading.Lock()

    def wait(self) -> None:
        if self.on:
            with self._lock:
                delay = self._rng.uniform(0.0, self.MAX_S)
            time.sleep(delay)

    def wrap(self, obj: Any, method: str) -> None:
        inner = getattr(obj, method)

        def jittered(*args: Any, **kwargs: Any) -> Any:
            self.wait()
            return inner(*args, **kwargs)

        setattr(obj, method, jittered)


def stage_layers(num_layers: int, stage: int, stages: int) -> tuple[int, int]:
    """The model layers ``[first, end)`` pipeline stage ``stage`` holds: ATOM's own split
    (``atom.models.utils.get_pp_indices``), all of them with one stage."""
    if stages <= 1:
        return 0, num_layers
    from atom.models.utils import get_pp_indices

    first, end = get_pp_indices(num_layers, stage, stages)
    return int(first), int(end)


def _key_text(key: Any) -> str:
    """An lmcache ``CacheEngineKey`` as one string: chunk hash first (what a table shows
    of it), then every field that tells two deployments' data apart."""
    h = getattr(key, "chunk_hash", key)
    head = f"{h:x}" if isinstance(h, int) else str(h)
    fields = ("model_name", "world_size", "worker_id", "dtype")
    return "/".join([head, *(str(getattr(key, f, "")) for f in fields)])


def _server_socket(server: Any) -> str | None:
    transport = getattr(server, "transport", None)
    path = getattr(transport, "socket_path", None)
    return str(path) if path else None


def _create_connector(config: Any, role: str) -> Any:
    """ATOM's offload connector for ``role`` through its own factory (the module
    registers ``lmcache_offload`` on import)."""
    import atom.kv_transfer.offload  # noqa: F401  registers the backend
    from atom.kv_transfer.disaggregation.factory import KVConnectorFactory

    return KVConnectorFactory.create_connector(config, role=role)
