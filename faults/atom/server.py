"""The two processes of one ATOM server, as ATOM lays them out: the scheduler side
(ATOM's EngineCore process: its ``Scheduler``, ``BlockManager`` and the offload
connector's scheduler half, stepped by ATOM's own ``EngineCore`` step methods) and a
worker (a model-runner process for TP rank 0: the connector's worker half, a real
lmcache engine and its ZMQ lookup server, and the fake forward).

Runs only inside server processes (``faults.atom.zygote`` forks them). ATOM is imported
from the checkout on ``sys.path``; method names that drift between ATOM commits are
looked up, not assumed. What is faked is listed in ``faults.atom.boundary``; the one
more stand-in is ATOM's process manager (``_RunnerManager``), which carries ATOM's calls
to the worker over a pipe instead of shared memory.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any, Callable

from faults.atom.spec import AtomRequest, FaultSpec, RawEvent, ServerSpec
from reference.stack.worker import page_digest

# -- events ---------------------------------------------------------------------------


class EventLog:
    """The events one process records, stamped with the host's monotonic clock."""

    def __init__(self) -> None:
        self.events: list[RawEvent] = []
        self.step = -1

    def record(self, kind: str, op: Any = None, req_id: str | None = None, **data: Any) -> None:
        if req_id is None and op is not None:
            req_id = op[0]
        self.events.append(RawEvent(time.monotonic(), self.step, kind, op, req_id, data))

    def take(self) -> list[RawEvent]:
        out, self.events = self.events, []
        return out


def op_of(value: Any, kind: str, names: dict[Any, str]) -> tuple[str, int, str]:
    """A trace operation id for an ATOM completion id: an exact ``Load/SaveOperationId``
    keeps its generation; a bare request id (older ATOM) gets generation 0."""
    req = getattr(value, "req_id", value)
    gen = int(getattr(value, "generation", 0))
    return (names.get(req, str(req)), gen, kind)


# -- ATOM's configuration, as the pieces under test read it ---------------------------


def atom_config(spec: ServerSpec) -> SimpleNamespace:
    """The fields of ATOM's ``Config`` that its scheduler, block manager and offload
    connector read, for a small dense model (2 layers, 2 KV heads of 8)."""
    hf = SimpleNamespace(
        architectures=["LlamaForCausalLM"],
        sliding_window=None,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        hidden_size=16,
        model_type="llama",
    )
    return SimpleNamespace(
        model="kvfault-toy",
        port=spec.port,
        hf_config=hf,
        kv_transfer_config={"kv_connector": "lmcache_offload", "kv_role": "offload"},
        kv_cache_block_size=spec.block_size,
        num_kvcache_blocks=spec.num_blocks,
        kv_cache_dtype="bf16",
        enable_prefix_caching=spec.prefix_caching,
        enable_chunked_prefill=True,
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        long_prefill_token_threshold=0,
        decode_context_parallel_size=1,
        prefill_context_parallel_size=1,
        max_model_len=spec.max_model_len,
        bos_token_id=1,
        eos_token_id=-1,
        stop_token_ids=[],
        scheduler_delay_factor=0.0,
        speculative_config=None,
        tensor_parallel_size=1,
        tp_world_size=1,
        pipeline_parallel_size=1,
        data_parallel_size=1,
        parallel_config=SimpleNamespace(
            data_parallel_rank=spec.dp_rank,
            data_parallel_size=1,
            pipeline_parallel_rank=0,
        ),
        kv_events_config=None,
        enforce_eager=True,
    )


def lmcache_env(spec: ServerSpec) -> dict[str, str]:
    """The ``LMCACHE_*`` and ``OFFLOAD_*`` environment ATOM's offload reads."""
    return {
        "LMCACHE_CHUNK_SIZE": str(spec.chunk_size),
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": str(spec.cpu_cache_gib),
        "OFFLOAD_MIN_LOAD_TOKENS": str(spec.min_load_tokens),
    }


# -- the worker -----------------------------------------------------------------------


class HostKv:
    """``reference.interfaces.KvPages`` over ATOM's KV tensors: a page's fingerprint is
    written into every segment of its block (first 8 bytes of each), so a restore that
    moved any segment wrong reads back as a different page."""

    def __init__(self, segments: list[Any]):
        import torch

        self._views = [s.view(s.shape[0], -1).view(torch.int64) for s in segments]
        self.num_blocks = int(segments[0].shape[0]) if segments else 0

    def read(self, block: int) -> int | None:
        values = {int(v[block, 0]) for v in self._views}
        if len(values) == 1:
            return values.pop()
        return hash(tuple(sorted(values)))

    def write(self, block: int, value: int) -> None:
        for v in self._views:
            v[block, :] = value

    def read_state(self, req_id: str) -> int | None:
        return None

    def write_state(self, req_id: str, state: Any | None) -> None:
        pass  # dense models only: no state slot


class WorkerProcess:
    """ATOM's model-runner side for TP rank 0: the offload connector's worker half with
    a real lmcache engine and lookup server, and the fake forward."""

    def __init__(self, spec: ServerSpec, log: EventLog, socket_dir: str):
        from faults.atom import boundary

        os.environ.update(lmcache_env(spec))
        boundary.install_all(socket_dir)
        kernels = boundary.install_kernels()
        import torch

        from fakes.model import DeterministicModel
        from reference.types import Geometry

        self.spec, self.log = spec, log
        self.config = atom_config(spec)
        self.model = DeterministicModel(
            "dense", Geometry(block_size=spec.block_size, chunk_size=spec.chunk_size)
        )
        layers = {
            f"layers.{i}": SimpleNamespace(
                k_cache=torch.zeros(spec.num_blocks, spec.block_size, 2, 8, dtype=torch.bfloat16),
                v_cache=torch.zeros(spec.num_blocks, spec.block_size, 2, 8, dtype=torch.bfloat16),
            )
            for i in range(2)
        }
        self.kv = HostKv([t for layer in layers.values() for t in (layer.k_cache, layer.v_cache)])
        self.connector = _create_connector(self.config, "worker")
        self.connector.register_kv_caches(layers, None, spec.num_blocks)
        if not boundary.place_on_host_device(self.connector, kernels):
            raise RuntimeError("this ATOM's offload worker has no codec/GPU connector to place")
        self.impl = getattr(self.connector, "_impl", self.connector)
        self.engine = getattr(self.impl, "_engine", None)
        self.faults = WorkerFaults(spec.faults, self, log)
        self.outputs: dict[str, tuple[int, ...]] = {}
        self.loads: dict[Any, tuple[list[int], int, int]] = {}
        self.forwards = 0
        server = getattr(self.impl, "_lookup_server", None)
        self.socket = _server_socket(server)
        if self.socket:
            log.record("bind", server=spec.name, path=os.path.basename(self.socket))

    # ATOM's model-runner calls, as its process manager sends them
    def process_kvconnector_output(self, meta: Any) -> None:
        self.faults.before_call()
        for req in getattr(meta, "requests", ()) or ():
            ls = getattr(req, "load_spec", None)
            if ls is not None:
                key = getattr(req, "load_operation", None) or req.req_id
                self.loads[key] = (
                    list(req.block_ids),
                    int(ls.hbm_cached_tokens),
                    int(ls.lmcache_cached_tokens),
                )
        self.connector.start_load_kv(meta)

    def forward(self, items: list[tuple], names: dict[int, str]) -> list[int]:
        """Compute each scheduled range into the KV blocks and sample one token each:
        ``items`` are ``(seq_id, req, start, end, blocks, k)``; ``k`` is the index of
        the token to sample (the prompt's ``k``-th output), -1 for a middle chunk."""
        delay = self.faults.forward_delay(self.forwards)
        tokens = []
        num = sum(end - start for _, _, start, end, _, _ in items)
        self.log.record("forward_start", index=self.forwards, tokens=num, duration=delay)
        if delay:
            time.sleep(delay)
        for _seq_id, req, start, end, blocks, k in items:
            if end > start:
                self.model.compute(self.kv, req, blocks, start, end)
            if k < 0:
                tokens.append(0)
                continue
            if k == 0:
                self.outputs[req.req_id] = self.model.output(self.kv, req, blocks)
            tokens.append(self.outputs[req.req_id][k])
        self.log.record("forward_end", index=self.forwards)
        self.forwards += 1
        return tokens

    def lookup_pins(self) -> int | None:
        """Lookups whose chunks the lmcache engine still pins (a lookup pins what it
        found until the connector unpins it), or None when this engine keeps no such
        record (then the quiescent record leaves the field out rather than say 0)."""
        pins = getattr(self.engine, "lookup_pins", None)
        if not isinstance(pins, dict):
            return None
        return sum(1 for held in pins.values() if held)

    def resident_prefix(self, req: Any, blocks: list[int]) -> int:
        """Tokens of ``req``'s prompt, in whole blocks from its start, whose pages (as a
        cold run computes them) some block of ``blocks`` holds: the prefix HBM still has
        that no live request owns. The model's own fingerprints, not ATOM's index."""
        have = {self.kv.read(b) for b in blocks}
        n = 0
        for page in self.model.cold_pages(req)[: req.prompt_len // self.spec.block_size]:
            if page not in have:
                break
            n += 1
        return n * self.spec.block_size

    def async_proc_aggregation(self, names: dict[Any, str]) -> Any:
        out = self.connector.get_finished()
        for attr, kind, outcome in (
            ("finished_loading", "load", "finished"),
            ("failed_loading", "load", "failed"),
            ("finished_saving", "save", "finished"),
        ):
            for value in getattr(out, attr, ()) or ():
                op = op_of(value, kind, names)
                load = self.loads.pop(value, None) if kind == "load" else None
                if load is not None and outcome == "finished":
                    # What the load left in HBM, page by page, for the judge to compare
                    # with recompute (correctness).
                    blocks, start, end = load
                    bs = self.spec.block_size
                    pages = [self.kv.read(b) for b in blocks[start // bs : end // bs]]
                    self.log.record("copy_complete", op=op, digest=page_digest(pages))
                self.log.record("finished_reported", op=op, outcome=outcome)
        # Faults act on the way to the scheduler: a dropped completion was reported.
        return self.faults.finished(out, names)

    def close(self) -> None:
        if self.socket:
            self.log.record("unbind", server=self.spec.name, path=os.path.basename(self.socket))
        for obj in (getattr(self.impl, "_lookup_server", None), self.engine):
            close = getattr(obj, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # best effort: the process exits next
                    pass


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


class WorkerFaults:
    """The worker's injected faults (``FaultSpec``), each recorded as a ``fault`` event
    with its evidence. They wrap lmcache's engine and the lookup server (collaborators
    of ATOM's connector) or edit what ``get_finished`` returns; ATOM's code is
    untouched."""

    def __init__(self, spec: FaultSpec, worker: WorkerProcess, log: EventLog):
        self.spec, self.log = spec, log
        self.seen: dict[str, int] = {"load": 0, "save": 0}
        self.held: list[tuple[str, Any]] = []
        self.evict_pending: tuple[Any, int] | None = None
        engine = worker.engine
        if engine is not None and spec.fail_retrieve:
            self._fail_nth(engine, "retrieve", spec.fail_retrieve)
        if engine is not None and spec.fail_store:
            self._fail_nth(engine, "store", spec.fail_store)
        if engine is not None and spec.corrupt_load:
            self._corrupt_nth(engine, worker, spec.corrupt_load)
        server = getattr(worker.impl, "_lookup_server", None)
        if engine is not None and spec.evict_after_lookup:
            self._evict_after(engine, spec.evict_after_lookup)
        if server is not None and spec.drop_lookup_reply:
            self._drop_reply(server, spec.drop_lookup_reply)

    def forward_delay(self, index: int) -> float:
        if index == 0 and self.spec.slow_first_forward_s > 0:
            self.log.record(
                "fault", injector="slow_first_forward", delay=self.spec.slow_first_forward_s
            )
            return self.spec.slow_first_forward_s
        return 0.0

    def _fail_nth(self, engine: Any, method: str, n: int) -> None:
        inner = getattr(engine, method)
        count = [0]
        log = self.log
        name = f"{method}_failure"

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n:
                log.record("fault", injector=name, call=n)
                raise RuntimeError(f"kvfault: injected lmcache {method} failure")
            return inner(*args, **kwargs)

        setattr(engine, method, wrapped)

    def _corrupt_nth(self, engine: Any, worker: WorkerProcess, n: int) -> None:
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
        inner = engine.lookup
        count = [0]

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            hit = inner(*args, **kwargs)
            if hit:
                count[0] += 1
                if count[0] == n:
                    self.evict_pending = (engine, int(hit))
            return hit

        engine.lookup = wrapped

    def before_call(self) -> None:
        """Run an eviction armed by a lookup (``evict_after_lookup``)."""
        pending, self.evict_pending = self.evict_pending, None
        if pending is not None:
            engine, hit = pending
            engine.clear()
            self.log.record("fault", injector="evict_after_lookup", hit=hit)

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

    def finished(self, out: Any, names: dict[Any, str]) -> Any:
        """Drop or duplicate the n-th reported completion of a kind."""
        for attr, kind in (
            ("finished_loading", "load"),
            ("failed_loading", "load"),
            ("finished_saving", "save"),
        ):
            values = getattr(out, attr, None)
            if not values:
                continue
            for value in sorted(values, key=repr):
                self.seen[kind] += 1
                nth = self.seen[kind]
                if self.spec.drop_finished == (kind, nth):
                    values.discard(value)
                    self.log.record(
                        "fault", op=op_of(value, kind, names), injector="lost_completion", nth=nth
                    )
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


# -- the scheduler side (ATOM's EngineCore process) -----------------------------------


class WorkerLink:
    """The scheduler's end of the pipe to one worker process: a call and its reply,
    with a bound on every wait."""

    def __init__(self, conn: Any, log: EventLog, timeout_s: float = 30.0):
        self.conn, self.log, self.timeout_s = conn, log, timeout_s

    def call(self, name: str, *args: Any) -> Any:
        self.conn.send((name, args))
        if not self.conn.poll(self.timeout_s):
            raise TimeoutError(f"worker did not answer {name} within {self.timeout_s:g}s")
        ok, value, events = self.conn.recv()
        self.log.events.extend(events)
        if not ok:
            raise RuntimeError(f"worker failed in {name}: {value}")
        return value


class _RunnerManager:
    """Stands in for ATOM's process manager (``AsyncIOProcManager``): the same calls,
    carried to the one worker over a pipe; KV outputs aggregated by ATOM's own
    ``KVOutputAggregator`` exactly as the manager does."""

    def __init__(self, link: WorkerLink, side: SchedulerProcess):
        self.link, self.side = link, side
        self.aggregator = None
        try:
            from atom.kv_transfer.disaggregation.aggregator import KVOutputAggregator

            self.aggregator = KVOutputAggregator(world_size=1)
        except ImportError:  # older ATOM: one worker's output is the aggregate
            pass

    def call_func(self, name: str, *args: Any, wait_out: bool = False, **kwargs: Any) -> Any:
        if name == "process_kvconnector_output":
            self.side.observe_meta(args[0])
            return self.link.call(name, args[0])
        if name == "forward":
            return self.side.forward(args[0])
        raise NotImplementedError(f"the atom tier's worker has no {name}")

    def call_func_with_aggregation(self, name: str, *args: Any, timeout: float = 10.0) -> Any:
        out = self.link.call(name, self.side.names)
        if self.aggregator is not None:
            out = self.aggregator.aggregate([out])
        self.side.observe_delivered(out)
        return out


class SchedulerProcess:
    """ATOM's scheduler side, stepped by ATOM's own ``EngineCore`` step methods bound
    to this stand-in (scheduler, process manager, queues). Observes the connector's
    calls to record the trace; changes none of them."""

    label = "kvfault atom EngineCore"
    # ATOM's EngineCore step methods, set on the class at construction (_bind_engine_core)
    _process_engine_step_inner: Callable[[], None]
    _advance_idle_kv_transfer: Callable[[], None]

    def __init__(self, spec: ServerSpec, log: EventLog, link: WorkerLink, socket_dir: str):
        from faults.atom import boundary

        os.environ.update(lmcache_env(spec))
        boundary.install_all(socket_dir)
        import queue

        from atom.model_engine.scheduler import Scheduler

        self.spec, self.log, self.link = spec, log, link
        self.config = atom_config(spec)
        self.scheduler = Scheduler(self.config)
        self.connector = self.scheduler.kv_connector
        if self.connector is None:
            raise RuntimeError("ATOM's scheduler built no KV connector for lmcache_offload")
        self.impl = getattr(self.connector, "_impl", self.connector)
        self.runner_mgr = _RunnerManager(link, self)
        self.kv_transfer_enabled = True
        self.output_queue: queue.Queue = queue.Queue()
        self.stream_output_queue: queue.Queue = queue.Queue()
        self._next_idle_kv_drain = 0.0
        self.names: dict[Any, str] = {}
        self.requests: dict[str, AtomRequest] = {}
        self.seqs: dict[str, Any] = {}
        self.pending_lookup: dict[str, int] = {}  # sid -> what lmcache's lookup answered
        self.looked_up: set[str] = set()
        self.resident: dict[str, int] = {}  # sid -> prompt tokens free HBM blocks hold
        self._next_id = 1
        self._observe()
        _bind_engine_core(type(self))

    # -- observation (wrappers that record, then call ATOM's method unchanged) --------
    def _observe(self) -> None:
        impl, log, names = self.impl, self.log, self.names
        client = getattr(impl, "_lookup_client", None)
        raw: dict[str, int] = {}
        if client is not None:
            lookup = client.lookup

            def observed_lookup(token_ids: Any, *args: Any, **kwargs: Any) -> Any:
                hit = lookup(token_ids, *args, **kwargs)
                sid = kwargs.get("lookup_id", args[0] if args else None)
                raw[str(sid)] = int(hit or 0)
                return hit

            client.lookup = observed_lookup

        match = impl.get_num_new_matched_tokens

        def observed_match(seq: Any) -> Any:
            raw.pop(str(seq.id), None)
            self._note_resident(seq)
            need, park = match(seq)
            self.pending_lookup[str(seq.id)] = raw.get(str(seq.id), 0)
            return need, park

        impl.get_num_new_matched_tokens = observed_match
        for method, kind in (("load_finished", "load"), ("load_failed", "load")):
            inner = getattr(impl, method, None)
            if inner is None:
                continue
            setattr(impl, method, _applied(inner, kind, method, log, names))
        inner_save = getattr(impl, "save_finished", None)
        if inner_save is not None:

            def observed_save(value: Any, _inner: Callable[[Any], Any] = inner_save) -> None:
                # In flight: a dict of exact save generations at ATOM's main, a set of
                # request ids in older commits.
                inflight = getattr(impl, "_save_inflight", None)
                sid = str(getattr(value, "req_id", value))
                if isinstance(inflight, dict):
                    live = inflight.get(sid) == value
                else:
                    live = inflight is None or sid in inflight
                _inner(value)
                if live:
                    log.record("save_done", op=op_of(value, "save", names), outcome="finished")

            impl.save_finished = observed_save

    def _note_resident(self, seq: Any) -> None:
        """With ATOM's HBM prefix cache on: the prompt's leading pages that free HBM
        blocks (owned by no live request) still hold, for ``efficiency`` to compare with
        ATOM's HBM hit. Asked before ATOM allocates for the request."""
        if not self.spec.prefix_caching:
            return
        from reference.types import Request

        name = self.names[seq.id]
        r = self.requests[name]
        owned = {b for s in self.seqs.values() for b in (getattr(s, "block_table", None) or ())}
        free = [b for b in range(self.spec.num_blocks) if b not in owned]
        req = Request(name, r.prompt, r.cache_seed, max_output_tokens=r.max_tokens)
        self.resident[str(seq.id)] = int(self.link.call("resident_prefix", req, free))

    def _lookup_event(self, seq: Any, hbm: int, kv_end: int, claim: int) -> None:
        sid = str(seq.id)
        if sid in self.looked_up or sid not in self.pending_lookup:
            return
        self.looked_up.add(sid)
        hit = self.pending_lookup[sid]
        name = self.names[seq.id]
        self.log.record(
            "key",
            req_id=name,
            site="lookup",
            first=self._first_key(seq),
            seed=self.requests[name].cache_seed,
        )
        self.log.record(
            "lookup",
            req_id=self.names[seq.id],
            prompt_len=int(seq.num_prompt_tokens),
            kv_hit=hit,
            states=[],
            hbm_hit=int(hbm),
            claim=int(claim),
            kv_end=int(kv_end),
            hybrid=False,
            **({"hbm_resident": self.resident[sid]} if sid in self.resident else {}),
        )

    def _in_handoff(self, seq: Any) -> bool:
        """Whether ATOM is computing ``seq`` up to a chunk boundary before it loads the
        rest (its unaligned handoff; an ATOM without one never is)."""
        return str(seq.id) in (getattr(self.impl, "_handoff_loads", None) or ())

    def _first_key(self, seq: Any) -> str | None:
        """The key lmcache's lookup gives the prompt's first chunk (what ATOM's lookup
        sends is the prompt's token ids), or None for a prompt shorter than a chunk."""
        client = getattr(self.impl, "_lookup_client", None)
        tdb = getattr(client, "token_database", None)
        if tdb is None:
            return None
        tokens = list(seq.token_ids[: seq.num_prompt_tokens])
        for _start, _end, key in tdb.process_tokens(tokens, make_key=False):
            return f"{key:x}" if isinstance(key, int) else str(key)
        return None

    def observe_meta(self, meta: Any) -> None:
        for req in getattr(meta, "requests", ()) or ():
            seq = self.seqs.get(self.names.get(req.req_id, ""))
            if getattr(req, "load_spec", None) is not None and seq is not None:
                ls = req.load_spec
                op = op_of(getattr(req, "load_operation", None) or req.req_id, "load", self.names)
                hbm, lmc = int(ls.hbm_cached_tokens), int(ls.lmcache_cached_tokens)
                self._lookup_event(seq, hbm, lmc, lmc)
                self.log.record("dispatch", op=op, start=hbm, kv_end=lmc, claim=lmc)
            if getattr(req, "save_spec", None) is not None:
                op = op_of(getattr(req, "save_operation", None) or req.req_id, "save", self.names)
                self.log.record(
                    "save",
                    op=op,
                    start=int(req.save_spec.skip_leading_tokens),
                    end=len(req.token_ids),
                )

    def observe_delivered(self, out: Any) -> None:
        if out is None:
            return
        for attr, kind, outcome in (
            ("finished_loading", "load", "finished"),
            ("failed_loading", "load", "failed"),
            ("finished_saving", "save", "finished"),
        ):
            for value in getattr(out, attr, ()) or ():
                op = op_of(value, kind, self.names)
                self.log.record("delivered", op=op, outcome=outcome)
                if kind == "load" and not hasattr(self.impl, "load_finished"):
                    # Older ATOM: no per-generation check; the scheduler applies every
                    # load completion it receives.
                    self.log.record("completion_applied", op=op, outcome=outcome)

    # -- the fake forward, carried to the worker ---------------------------------------
    def forward(self, batch: Any) -> Any:
        from atom.model_engine.scheduler import ScheduledBatchOutput

        from reference.types import Request

        items = []
        starts = list(getattr(batch, "num_cached_tokens", []) or [])
        counts = [int(n) for n in batch.num_scheduled_tokens]
        for i, seq_id in enumerate(batch.req_ids):
            name = self.names[seq_id]
            seq = self.seqs[name]
            r = self.requests[name]
            start = int(starts[i]) if i < len(starts) else int(seq.num_cached_tokens)
            prompt = int(seq.num_prompt_tokens)
            if start < prompt:  # a prefill chunk
                end = min(prompt, start + counts[i])
                if end >= prompt or not self._in_handoff(seq):
                    # No load follows this chunk: what ATOM claims from the tier is
                    # nothing. (In an unaligned handoff ATOM computes up to the chunk
                    # boundary first and dispatches the load after: the lookup is
                    # recorded with that dispatch.)
                    self._lookup_event(seq, start, 0, 0)
                k = 0 if end >= prompt else -1
            else:  # a decode step: the next output token
                end = start
                k = int(seq.num_tokens) - prompt
            req = Request(name, r.prompt, r.cache_seed, max_output_tokens=r.max_tokens)
            items.append((seq_id, req, start, end, list(seq.block_table), k))
        tokens = self.link.call("forward", items, self.names)
        return ScheduledBatchOutput(list(batch.req_ids), [(t,) for t in tokens], None, None, None)

    # -- running ------------------------------------------------------------------------
    def submit(self, requests: list[AtomRequest]) -> None:
        from atom.model_engine.sequence import Sequence
        from atom.sampling_params import SamplingParams

        for r in requests:
            seq_id = self._next_id
            self._next_id += 1
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            kwargs: dict[str, Any] = {"id": seq_id}
            if r.mm:
                kwargs["multimodal_data"] = {"image_digest": r.cache_seed}
            seq = Sequence(list(r.prompt), self.spec.block_size, sampling_params=params, **kwargs)
            self.names[seq_id] = r.req_id
            self.requests[r.req_id] = r
            self.seqs[r.req_id] = seq
            self.log.record("arrive", req_id=r.req_id)
            self.scheduler.add(seq)

    def run(self, limit_s: float) -> bool:
        """Step as ATOM's busy loop does until nothing is left (True) or ``limit_s``
        passes (False: the run hung)."""
        deadline = time.monotonic() + limit_s
        # An ATOM whose busy loop does not drain KV work once the queues are empty
        # (older commits have no has_pending_kv_work) stops stepping there, as here.
        pending = getattr(self, "has_pending_kv_work", None)
        while time.monotonic() < deadline:
            self.log.step += 1
            if not self.scheduler.is_finished():
                self._process_engine_step_inner()
            elif pending is not None and pending():
                self._advance_idle_kv_transfer()
                time.sleep(0.001)
            else:
                self._collect_outputs()
                return True
            self._collect_outputs()
        return False

    def _collect_outputs(self) -> None:
        while not self.output_queue.empty():
            item = self.output_queue.get_nowait()
            if isinstance(item, tuple):  # ("STREAM", ...) or ("READY", None)
                continue
            for seq in item:
                name = self.names.get(seq.id)
                if name is not None:
                    tokens = [int(t) for t in seq.completion_token_ids]
                    self.log.record("output", req_id=name, tokens=tokens)

    def quiescent(self) -> None:
        """What this engine still holds now that its run has nothing left."""
        bm = self.scheduler.block_manager
        pool = getattr(bm, "kv", None)
        stats: dict[str, Any] = getattr(self.connector, "get_statistics", lambda: {})() or {}
        held: dict[str, Any] = dict(  # data of the record: never its op or req_id
            hbm_blocks=int(getattr(pool, "num_used", 0) or 0) if pool is not None else 0,
            loads=int(stats.get("loads_pending", 0)),
            saves=int(stats.get("saves_pending", 0)),
            deferred=len(getattr(self.scheduler, "deferred_free_blocks", {}) or {}),
            unfinished=int(self.scheduler.get_num_unfinished_requests()),
        )
        # The tier's pins live in the worker's lmcache engine: a pin nobody releases
        # keeps its chunks from eviction for the process's life.
        pins = self.link.call("lookup_pins")
        if pins is not None:
            held["lookup_pins"] = int(pins)
        self.log.record("quiescent", engine=self.spec.name, **held)


def _applied(inner: Any, kind: str, method: str, log: EventLog, names: dict[Any, str]) -> Any:
    def observed(value: Any) -> Any:
        accepted = inner(value)
        if accepted is not False:
            log.record(
                "completion_applied",
                op=op_of(value, kind, names),
                outcome="finished" if method == "load_finished" else "failed",
            )
        return accepted

    return observed


# ATOM's EngineCore step methods the stand-in takes: the step itself is required; the
# rest are bound when this ATOM has them (the step calls what it needs by name).
_STEP_REQUIRED = ("_process_engine_step_inner",)
_STEP_OPTIONAL = (
    "has_pending_kv_work",
    "_advance_idle_kv_transfer",
    "_dispatch_idle_offload_work",
    "_poll_kv_transfer_progress",
)


def _bind_engine_core(cls: type) -> None:
    """Give the stand-in ATOM's own ``EngineCore`` step methods (functions of the class,
    called with this object as ``self``). Raises when this ATOM lacks the step."""
    from atom.model_engine.engine_core import EngineCore

    missing = [m for m in _STEP_REQUIRED if not hasattr(EngineCore, m)]
    if missing:
        raise RuntimeError(f"this ATOM's EngineCore lacks {', '.join(missing)}")
    for m in _STEP_REQUIRED + _STEP_OPTIONAL:
        if hasattr(EngineCore, m) and m not in cls.__dict__:
            setattr(cls, m, getattr(EngineCore, m))
