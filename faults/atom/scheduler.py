"""The scheduler process of one ATOM server: ATOM's EngineCore side (its ``Scheduler``,
``BlockManager`` and the offload connector's scheduler half), stepped by ATOM's own
``EngineCore`` step methods bound to a stand-in, and its pipe to the worker process.

Runs only inside server processes (``kvfault.faults.atom.zygote`` forks them). ATOM is imported
from the checkout on ``sys.path``; method names that drift between ATOM commits are
looked up, not assumed. What is faked is listed in ``kvfault.faults.atom.boundary``; the one
more stand-in is ATOM's process manager (``_RunnerManager``), which carries ATOM's calls
to the worker over a pipe instead of shared memory.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from kvfault.faults.atom import pipe
from kvfault.faults.atom.event_log import EventLog, completion_fields, op_of
from kvfault.faults.atom.fixes import fixes
from kvfault.faults.atom.pictures import (
    PICTURE_TOKEN,
    MergeRaised,
    RunnerMerge,
    cold_content,
    multimodal_data,
)
from kvfault.faults.atom.runner_rules import model_merge, pure_middle_chunk_rule
from kvfault.faults.atom.server_config import atom_config, use_lmcache_env
from kvfault.faults.atom.spec import AtomRequest, ServerSpec
from kvfault.faults.errors import KvfaultError
from kvfault.reference.errors import RebuiltWhenUnpickled

# How long past its run's limit a call into the worker may take before it has hung.
HANG_GRACE_S = 1.0


class WorkerHung(RebuiltWhenUnpickled, KvfaultError):
    """The worker (``who``: "the worker", or "rank 1's worker" of a TP server) did not
    answer ``call`` within ``after_s``: the code under test hung there. ``stack``: the
    worker's stack at that moment (innermost call last); the line names its innermost
    frame outside Python's own library (where a lock or an event waits is no news)."""

    def __init__(self, call: str, after_s: float, stack: list[str], who: str = "the worker"):
        own = [f for f in stack if not _in_stdlib(f)]
        where = f"; in {(own or stack)[-1]}" if stack else ""
        super().__init__(f"{who}'s {call} did not return within {after_s:.1f}s{where}")
        self.call, self.after_s, self.stack = call, after_s, stack

    def evidence(self) -> dict[str, Any]:
        """What the host records of the hang (plain data)."""
        return {"hung": str(self), "call": self.call, "stack": self.stack}


class RunnerFailed(RebuiltWhenUnpickled, KvfaultError):
    """ATOM's model-runner code in a forward raised (``error``: the exception's name).
    ATOM's worker serves its calls with no handler (``AsyncIOProc.busy_loop``), so the
    worker process dies there and ATOM's process monitor shuts the server down: the
    server stops, answering nothing more."""

    def __init__(self, error: str, message: str):
        super().__init__(f"the model runner's forward raised {error}: {message}")
        self.error = error

    def evidence(self) -> dict[str, Any]:
        """What the host records of the stop (plain data)."""
        return {"died": str(self), "error": self.error}


def _in_stdlib(frame: str) -> bool:
    """Whether a faulthandler frame (``File "PATH", line N in NAME``) is in Python's
    own library."""
    import sysconfig

    lib = sysconfig.get_paths()["stdlib"].rstrip("/") + "/"
    return frame.startswith(f'File "{lib}') and "site-packages" not in frame


def _frames(dump: str) -> list[str]:
    """faulthandler's dump of one thread as frames, outermost first."""
    frames = [line.strip() for line in dump.splitlines() if line.strip().startswith("File ")]
    return frames[::-1]


class WorkerLink:
    """The scheduler's end of the pipe to one worker process: a call and its reply,
    with a bound on every wait. While ``deadline`` is set (a run's), a call waits at
    most until it plus ``HANG_GRACE_S``; a call not answered in time has hung
    (``WorkerHung``, with the stack of the worker, process ``pid``, read from
    ``stack_path``; ``who`` names the worker in it), and every later call raises the
    same at once."""

    def __init__(
        self,
        conn: Any,
        log: EventLog,
        timeout_s: float = 30.0,
        pid: int | None = None,
        stack_path: str | None = None,
        who: str = "the worker",
    ):
        self.conn, self.log, self.timeout_s = conn, log, timeout_s
        self.pid, self.stack_path, self.who = pid, stack_path, who
        self.deadline: float | None = None
        self.hung: WorkerHung | None = None

    def call(self, name: str, *args: Any) -> Any:
        if self.hung is not None:
            raise self.hung
        timeout = self.timeout_s
        if self.deadline is not None:
            timeout = min(timeout, max(0.0, self.deadline - time.monotonic()) + HANG_GRACE_S)
        try:
            return pipe.call(self.conn, name, args, timeout, self.log.events, "worker")
        except TimeoutError:
            self.hung = WorkerHung(name, timeout, self._stack(), self.who)
            raise self.hung from None

    def _stack(self, limit_s: float = 2.0) -> list[str]:
        """The worker's stack, as its signal handler writes it (bounded wait)."""
        if self.pid is None or self.stack_path is None:
            return []
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except OSError:
            return []
        deadline, text = time.monotonic() + limit_s, ""
        while time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                now = Path(self.stack_path).read_text(errors="replace")
            except OSError:
                continue
            if now and now == text:  # written whole: unchanged since the last look
                break
            text = now
        return _frames(text)


class WorkerRanks:
    """The scheduler's links to its workers, one per TP rank, rank 0 first. ``call``
    asks rank 0 alone (what one rank answers for the server: its lookup engine's pins,
    what HBM holds); ``each`` asks every rank in rank order, as ATOM's process manager
    broadcasts a call, and returns their answers. A run's deadline is every link's; the
    group has hung when any link has."""

    def __init__(self, links: list[WorkerLink]):
        if not links:
            raise ValueError("a server has at least one worker rank")
        self.links = links

    @property
    def deadline(self) -> float | None:
        return self.links[0].deadline

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        for link in self.links:
            link.deadline = value

    @property
    def hung(self) -> WorkerHung | None:
        return next((link.hung for link in self.links if link.hung is not None), None)

    def call(self, name: str, *args: Any) -> Any:
        return self.links[0].call(name, *args)

    def each(self, name: str, *args: Any) -> list[Any]:
        return [link.call(name, *args) for link in self.links]


def tp_tokens(per_rank: list[list[int]]) -> list[int]:
    """The tokens a TP forward samples from each rank's: on a GPU the ranks' partial
    results are reduced into one, so a rank whose KV shard is wrong makes the sample
    wrong. Where every rank's fake forward agrees, that token; where they differ, a
    token derived from all of them, so the output differs from the cold run's."""
    out = []
    for toks in zip(*per_rank, strict=True):
        same = all(t == toks[0] for t in toks)
        out.append(int(toks[0]) if same else (hash(tuple(map(int, toks))) & 0xFFFF) ^ 0x8000)
    return out


class _RunnerManager:
    """Stands in for ATOM's process manager (``AsyncIOProcManager``): the same calls,
    carried to every worker rank over a pipe; KV outputs aggregated over the ranks by
    ATOM's own ``KVOutputAggregator`` (one per manager, ``world_size`` the TP size),
    as the manager's ``call_func_with_aggregation`` does. Not its ``timeout`` (ATOM
    returns None once a rank's output is that late): a call here waits for every rank
    until the run's limit and ``HANG_GRACE_S``, so a rank that never answers ends the
    run as hung, which judges this stand-in, not ATOM."""

    def __init__(
        self,
        link: WorkerRanks,
        side: SchedulerProcess,
        forward: Callable[[Any], Any] | None = None,
        observe_meta: bool = True,
        observe_delivered: bool = True,
    ):
        # ``forward``: what a forward call runs (the side's own by default); the
        # observe flags: whether this manager's calls are the ones the trace records
        # (a pipeline's downstream stages get the head's metadata again, and with
        # stages the scheduler's input is the stages' aggregate, not this one).
        self.link, self.side = link, side
        self.forward = forward if forward is not None else side.forward
        self.observe_meta, self.observe_delivered = observe_meta, observe_delivered
        self.aggregator = None
        try:
            from atom.kv_transfer.disaggregation.aggregator import KVOutputAggregator

            self.aggregator = KVOutputAggregator(world_size=len(link.links))
        except ImportError:  # older ATOM: one worker's output is the aggregate
            if len(link.links) > 1:
                raise RuntimeError("this ATOM has no KVOutputAggregator for TP > 1") from None

    def call_func(self, name: str, *args: Any, wait_out: bool = False, **kwargs: Any) -> Any:
        self.side.flush_poison()
        if name == "process_kvconnector_output":
            if self.observe_meta:
                self.side.observe_meta(args[0])
            self.link.each(name, args[0], self.side.names)
            return None
        if name == "forward":
            return self.forward(args[0])
        if name == "flush_pp_send":
            return True  # a stage's hidden-state send: no NCCL here, nothing pending
        raise NotImplementedError(f"the atom tier's worker has no {name}")

    def call_func_with_aggregation(self, name: str, *args: Any, timeout: float = 10.0) -> Any:
        self.side.flush_poison()
        outs = self.link.each(name, self.side.names)
        out = outs[0] if self.aggregator is None else self.aggregator.aggregate(outs)
        if self.observe_delivered:
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

    def __init__(
        self, spec: ServerSpec, log: EventLog, link: WorkerRanks, socket_dir: str, instance_id: str
    ):
        from kvfault.faults.atom import boundary

        use_lmcache_env(spec, os.path.dirname(socket_dir))
        boundary.install_all(socket_dir)
        boundary.set_tp_rank(0, spec.tp_size)  # the engine core's process, as rank 0's
        import queue

        from atom.model_engine.scheduler import Scheduler

        self.spec, self.log, self.link = spec, log, link
        self.config = atom_config(spec, instance_id=instance_id)
        chosen = fixes(spec.fixes)
        for fix in chosen:
            fix.before_build("scheduler")
        self.scheduler = Scheduler(self.config, **self._engine_state(spec))
        self.per_req_cache = _per_req_cache(self.config)
        self.connector = self.scheduler.kv_connector
        if self.connector is None:
            raise RuntimeError("ATOM's scheduler built no KV connector for lmcache_offload")
        self.impl = getattr(self.connector, "_impl", self.connector)
        # Each pipeline stage's workers (one stage: all of them); the process manager
        # carries ATOM's calls to the first stage's.
        tp = spec.tp_size
        self.stages = [WorkerRanks(link.links[s * tp : (s + 1) * tp]) for s in range(spec.pp_size)]
        self.runner_mgr = _RunnerManager(self.stages[0], self, observe_delivered=spec.pp_size == 1)
        self.kv_transfer_enabled = True
        self.output_queue: queue.Queue = queue.Queue()
        self.stream_output_queue: queue.Queue = queue.Queue()
        self._next_idle_kv_drain = 0.0
        self.names: dict[Any, str] = {}
        self.requests: dict[str, AtomRequest] = {}
        self.seqs: dict[str, Any] = {}
        self.pending_lookup: dict[str, int] = {}  # sid -> what lmcache's lookup answered
        self.sent: dict[str, list[int]] = {}  # sid -> the token ids its lookup sent lmcache
        self.looked_up: set[str] = set()
        # sid -> seconds its lookup waited for a reply that never came (lmcache's
        # client answered 0 after its timeout)
        self.unanswered: dict[str, float] = {}
        self.resident: dict[str, int] = {}  # sid -> prompt tokens free HBM blocks hold
        self.loads_dispatched = 0
        self.abort_next: Any = None  # a sequence the client aborts before the next step
        # Deferred output (ATOM's model runner with one pipeline stage): what the last
        # forward sampled, surfaced by the next one.
        self.sampled: tuple[list[Any], list[tuple[int, ...]]] = ([], [])
        # ATOM's own rule for a forward that samples nothing (its runner returns before
        # postprocess for a batch of prefill middle chunks); None: every forward samples.
        self.pure_middle_chunk = pure_middle_chunk_rule()
        # ATOM's model runner's multimodal step (its model's merge, from the checkout),
        # built at the first request with a picture; and what each request's computed
        # positions hold (its ids, a picture's placeholders as the merge left them).
        self.merge: RunnerMerge | None = None
        self.content: dict[str, list[int]] = {}
        self.aborted: set[str] = set()
        self._next_id = 1
        # Blocks ATOM gave back or took fresh since the worker's last call: the worker
        # fills them with a sentinel before it does anything else (``flush_poison``).
        self.to_poison: list[int] = []
        self.slots_to_poison: list[int] = []  # state groups, likewise (hybrid models)
        self._observe()
        self._poison_free_blocks()
        for fix in chosen:  # outside the observers: the trace shows what lmcache said
            fix.scheduler(self)
        _bind_engine_core(type(self))

    def _engine_state(self, spec: ServerSpec) -> dict[str, Any]:
        """What ATOM's runner sends its engine process before the scheduler is built,
        for a hybrid model: the pool entries (on ``self.config``) and the state runtime
        (ATOM's sizing, run here on the same config: ``dsv4_runner``). Nothing for a
        dense model (ATOM's defaults)."""
        if spec.layout != "hybrid":
            return {}
        from kvfault.faults.atom import dsv4_boundary

        dsv4_boundary.install()
        from atom.model_engine.state_runtime import StateRuntime

        from kvfault.faults.atom.dsv4_runner import Dsv4Pools

        sizing = Dsv4Pools(
            self.config, num_blocks=spec.num_blocks, num_slots=spec.max_num_seqs, allocate=False
        )
        sizing.engine_config(self.config)
        # Through its wire form, as it crosses ATOM's process boundary.
        return {"state_runtime": StateRuntime.from_wire(sizing.state_runtime.to_wire())}

    # -- observation (wrappers that record, then call ATOM's method unchanged) --------
    def _observe(self) -> None:
        impl, log, names = self.impl, self.log, self.names
        client = getattr(impl, "_lookup_client", None)
        raw: dict[str, int] = {}
        if client is not None:
            lookup = client.lookup

            unanswered = self._observe_unanswered(client)

            def observed_lookup(token_ids: Any, *args: Any, **kwargs: Any) -> Any:
                unanswered.clear()
                t0 = time.monotonic()
                hit = lookup(token_ids, *args, **kwargs)
                sid = kwargs.get("lookup_id", args[0] if args else None)
                if unanswered:
                    # lmcache's client had no reply: ATOM's step waited this long in it.
                    self.unanswered[str(sid)] = round(time.monotonic() - t0, 3)
                raw[str(sid)] = int(hit or 0)
                self.sent[str(sid)] = list(token_ids)
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
                # In flight: a dict of exact save generations at ATOM's main (the
                # hybrid connector's: of sets of them), a set of request ids in older
                # commits.
                inflight = getattr(impl, "_save_inflight", None)
                sid = str(getattr(value, "req_id", value))
                if isinstance(inflight, dict):
                    held = inflight.get(sid)
                    live = value in held if isinstance(held, set) else held == value
                else:
                    live = inflight is None or sid in inflight
                _inner(value)
                if live:
                    log.record("save_done", op=op_of(value, "save", names), outcome="finished")

            impl.save_finished = observed_save

    @staticmethod
    def _observe_unanswered(client: Any) -> list[bool]:
        """A list that holds ``True`` once lmcache's client got no reply (its ZMQ
        transport returns nothing after its timeout or an error, and reconnects; the
        lookup then answers 0), until cleared."""
        flag: list[bool] = []
        transport: Any = getattr(client, "transport", None)
        inner = getattr(transport, "send_and_recv_all", None)
        if inner is None:
            return flag

        def observed(*args: Any, **kwargs: Any) -> Any:
            got = inner(*args, **kwargs)
            if not got:
                flag.append(True)
            return got

        transport.send_and_recv_all = observed
        return flag

    def _poison_free_blocks(self) -> None:
        """Make a load that wrote nothing (or less) show: no block ATOM frees or takes
        fresh keeps the pages it had. Without an HBM prefix cache a freed block holds
        nothing anyone may read, so it is poisoned when ATOM frees it (a save still
        reading it then copies the sentinel); with one, a freed block may be a cache
        hit later, so only a block ATOM takes fresh (for content about to be computed
        or loaded) is poisoned. Both wrap ATOM's own ``BlockManager`` methods."""
        bm = getattr(self.scheduler, "block_manager", None)
        if bm is None:
            return
        pending = self.to_poison
        state = getattr(bm, "state", None)
        pop = getattr(state, "pop", None)
        if self.spec.layout == "hybrid" and pop is not None:
            # A request's state group (ATOM's ``StateGroupPool.pop``, every place a
            # group is handed out) holds the state of whoever had it last: poisoned,
            # so a load that restores no SLOT shows.
            slots = self.slots_to_poison

            def poisoned_pop(*args: Any, **kwargs: Any) -> Any:
                group = pop(*args, **kwargs)
                slots.append(int(group))
                return group

            setattr(state, "pop", poisoned_pop)  # noqa: B010  wraps ATOM's method
        release = getattr(getattr(bm, "kv", None), "release_units", None)
        if release is not None:
            # Units ATOM's paged state checkpoints give back (an image evicted or
            # dropped) go to the free list: no longer the prefix cache's content.
            def poisoned_release(unit_ids: Any, *args: Any, **kwargs: Any) -> Any:
                ids = [int(u) for u in unit_ids]
                out = release(ids, *args, **kwargs)
                pending.extend(ids)
                return out

            bm.kv.release_units = poisoned_release
        fresh = getattr(bm, "_fresh_block", None)
        if fresh is not None:

            def poisoned_fresh(*args: Any, **kwargs: Any) -> Any:
                block = fresh(*args, **kwargs)
                pending.append(int(block))
                return block

            bm._fresh_block = poisoned_fresh
        if self.spec.prefix_caching:
            return
        deallocate = bm.deallocate

        def poisoned_deallocate(seq: Any, *args: Any, **kwargs: Any) -> Any:
            blocks = [int(b) for b in (getattr(seq, "block_table", None) or ())]
            out = deallocate(seq, *args, **kwargs)
            pending.extend(blocks)
            return out

        bm.deallocate = poisoned_deallocate

    def flush_poison(self) -> None:
        """Have the worker poison the blocks noted since its last call, before the call
        that could read or write them."""
        if self.to_poison:
            blocks, self.to_poison[:] = list(self.to_poison), []
            self.link.each("poison", blocks)
        if self.slots_to_poison:
            groups, self.slots_to_poison[:] = list(self.slots_to_poison), []
            self.link.each("poison_slots", groups)

    def _note_resident(self, seq: Any) -> None:
        """With ATOM's HBM prefix cache on: the prompt's leading pages that free HBM
        blocks (owned by no live request) still hold, for ``efficiency`` to compare with
        ATOM's HBM hit. Asked before ATOM allocates for the request."""
        if not self.spec.prefix_caching:
            return
        from kvfault.reference.types import Request

        name = self.names[seq.id]
        r = self.requests[name]
        owned = {b for s in self.seqs.values() for b in (getattr(s, "block_table", None) or ())}
        free = [b for b in range(self.spec.num_blocks) if b not in owned]
        req = Request(
            name, cold_content(r.prompt, r.picture), r.cache_seed, max_output_tokens=r.max_tokens
        )
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
            # ATOM's hybrid connector resumes only where a SLOT sidecar is stored.
            **({"sidecars": True} if self.spec.layout == "hybrid" else {}),
            **({"hbm_resident": self.resident[sid]} if sid in self.resident else {}),
            **({"unanswered_s": self.unanswered[sid]} if sid in self.unanswered else {}),
        )

    def _in_handoff(self, seq: Any) -> bool:
        """Whether ATOM is computing ``seq`` up to a chunk boundary before it loads the
        rest (its unaligned handoff; an ATOM without one never is)."""
        return str(seq.id) in (getattr(self.impl, "_handoff_loads", None) or ())

    def _first_key(self, seq: Any) -> str | None:
        """The key lmcache's lookup gives the prompt's first chunk (of the token ids
        ATOM's lookup sent, else the prompt's): its chunk hash, then the namespace (the model
        name ATOM gives lmcache) where the lookup client knows it; None for a prompt
        shorter than a chunk."""
        client = getattr(self.impl, "_lookup_client", None)
        tdb = getattr(client, "token_database", None)
        if tdb is None:
            return None
        tokens = self.sent.get(str(seq.id)) or list(seq.token_ids[: seq.num_prompt_tokens])
        namespace = getattr(getattr(tdb, "metadata", None), "model_name", None)
        for _start, _end, key in tdb.process_tokens(tokens, make_key=False):
            text = f"{key:x}" if isinstance(key, int) else str(key)
            return text if namespace is None else f"{text}/{namespace}"
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
                self.loads_dispatched += 1
                if self.loads_dispatched == self.spec.faults.abort_loading:
                    self.abort_next = seq
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
        for attr, kind, outcome in completion_fields(out):
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

        items = self._forward_items(batch)
        # The state moves ATOM's block manager gave this batch (a DSV4 request's SLOT
        # checkpointed into PAGE units, or restored from them): the worker runs them
        # before its forward, as ATOM's metadata builder does in ``build``.
        ops = getattr(batch, "state_maintenance_ops", None)
        ops = None if ops is None or ops.empty else ops
        tokens = tp_tokens(self.link.each("forward", items, self.names, ops))
        if self.pure_middle_chunk is not None and self.pure_middle_chunk(batch):
            # As ATOM's ModelRunner.forward: the KV is written, nothing is sampled, and
            # a deferred runner still holds what the last sampling forward sampled.
            return ScheduledBatchOutput(list(batch.req_ids), [], None, None, None)
        sampled: tuple[list[Any], list[tuple[int, ...]]] = (
            list(batch.req_ids),
            [(int(t),) for t in tokens],
        )
        if not self.spec.deferred_output:
            return ScheduledBatchOutput(*sampled, None, None, None)
        # As ATOM's runner defers: this forward returns the previous one's tokens (none
        # after the first), with no speculative rejections or bonus tokens.
        import numpy as np

        (ids, toks), self.sampled = self.sampled, sampled
        none = np.zeros(len(ids), dtype=np.int32)
        return ScheduledBatchOutput(ids, toks, none, none.copy(), None, is_deferred_out=True)

    def _forward_items(self, batch: Any) -> list[tuple]:
        """What each request of ``batch`` computes, as the workers' ``forward`` takes it:
        ``(seq_id, req, start, end, blocks, k, group)``; records the lookups of prefills that
        load nothing."""
        from kvfault.reference.types import Request

        items = []
        starts = list(getattr(batch, "num_cached_tokens", []) or [])
        counts = [int(n) for n in batch.num_scheduled_tokens]
        try:
            self._merge_pictures(batch, starts, counts)
        except MergeRaised as e:  # ATOM's own merge raised: its runner dies
            raise RunnerFailed(e.error, e.message) from e
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
                # A preempted request re-prefills its outputs too (ATOM schedules up to
                # ``num_tokens``): the chunk that reaches them samples the next output.
                total = int(seq.num_tokens)
                k = total - prompt if start + counts[i] >= total else -1
            else:  # a decode step: the next output token
                end = start
                k = int(seq.num_tokens) - prompt
            content = tuple(self.content[name]) if name in self.content else r.prompt
            req = Request(name, content, r.cache_seed, max_output_tokens=r.max_tokens)
            group = int(getattr(seq, "per_req_cache_group", -1))
            items.append((seq_id, req, start, end, list(seq.block_table), k, group))
        return items

    def _merge_pictures(self, batch: Any, starts: list[Any], counts: list[int]) -> None:
        """ATOM's model runner's multimodal step for a prefill batch (before its model
        runs): the pictures ATOM's scheduler gave this batch merged, by ATOM's own
        merge, over the tokens the batch computes; what it leaves at each computed
        position is what the fake model computes that position's KV from.
        ``MergeRaised`` when ATOM's merge raises (the runner's forward fails with it)."""
        if not getattr(batch, "multimodal_data", None) or not batch.total_tokens_num_prefill > 0:
            # No picture in the batch: ATOM's runner embeds the ids as they are (a
            # placeholder a picture was not given for included).
            for i, seq_id in enumerate(batch.req_ids):
                name = self.names[seq_id]
                if name in self.content and i < len(starts):
                    start = int(starts[i])
                    prompt = self.requests[name].prompt
                    self.content[name][start : start + counts[i]] = prompt[
                        start : start + counts[i]
                    ]
            return
        if self.merge is None:
            merge = model_merge(PICTURE_TOKEN)
            if merge is None:
                raise RuntimeError("this ATOM has no multimodal merge the tier can run")
            self.merge = RunnerMerge(merge)
        names = [self.names[seq_id] for seq_id in batch.req_ids]
        spans = [(int(starts[i]), int(starts[i]) + counts[i]) for i in range(len(names))]
        inputs = [
            list(self.requests[n].prompt[a:b]) for n, (a, b) in zip(names, spans, strict=True)
        ]
        merged = self.merge.embed(batch, inputs)
        for n, (a, b), ids in zip(names, spans, merged, strict=True):
            content = self.content.setdefault(n, list(self.requests[n].prompt))
            content[a:b] = ids

    # -- running ------------------------------------------------------------------------
    def submit(self, requests: list[AtomRequest]) -> None:
        from atom.model_engine.sequence import Sequence
        from atom.sampling_params import SamplingParams

        for r in requests:
            seq_id = self._next_id
            self._next_id += 1
            params = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            kwargs: dict[str, Any] = {"id": seq_id}
            if r.picture:  # as ATOM's server builds a request with an image
                kwargs["multimodal_data"] = multimodal_data(r.prompt, r.picture)
                self.content[r.req_id] = list(r.prompt)
            if self.per_req_cache:
                kwargs["has_per_req_cache"] = True
            seq = Sequence(list(r.prompt), self.spec.block_size, sampling_params=params, **kwargs)
            self.names[seq_id] = r.req_id
            self.requests[r.req_id] = r
            self.seqs[r.req_id] = seq
            self.log.record("arrive", req_id=r.req_id)
            self.scheduler.add(seq)

    def run(self, limit_s: float, until_answered: bool = False) -> bool:
        """Step as ATOM's busy loop does until nothing is left (True) or ``limit_s``
        passes (False: the run hung); with ``until_answered``, until no request is
        unfinished (a shutdown arriving right after the last answer)."""
        deadline = time.monotonic() + limit_s
        self.link.deadline = deadline  # a call into the worker past it has hung
        try:
            return self._run(deadline, until_answered)
        finally:
            self.link.deadline = None
            if self.link.hung is not None:  # also when ATOM's step swallowed it
                raise self.link.hung

    def busy(self) -> bool:
        """Whether ATOM's busy loop steps the engine now (else it only drains KV work)."""
        return not self.scheduler.is_finished()

    def step(self) -> None:
        """One engine step, as ATOM's busy loop takes it."""
        self._process_engine_step_inner()

    def _run(self, deadline: float, until_answered: bool) -> bool:
        # An ATOM whose busy loop does not drain KV work once the queues are empty
        # (older commits have no has_pending_kv_work) stops stepping there, as here.
        pending = getattr(self, "has_pending_kv_work", None)
        while time.monotonic() < deadline:
            self._client_abort()
            if until_answered and not self.scheduler.get_num_unfinished_requests():
                self._collect_outputs()
                return True
            self.log.step += 1
            if self.busy():
                self.step()
            elif pending is not None and pending():
                self._advance_idle_kv_transfer()
                time.sleep(0.001)
            else:
                self._collect_outputs()
                return True
            self._collect_outputs()
        return False

    def wait_stored(
        self, tokens: list[int], want: int, limit_s: float, backend: str | None = None
    ) -> bool:
        """Wait until the tier holds ``want`` tokens of ``tokens`` from the start (a save
        that ATOM's worker runs on its own thread has landed), at most ``limit_s``;
        whether it did. With ``backend``, until that lmcache storage backend of the
        worker's holds them. Steps nothing: what ATOM reports meanwhile is unchanged."""
        deadline = time.monotonic() + limit_s
        while True:
            # Every rank's engine holds its shard: the prompt is stored when all do.
            haves = self.link.each("stored_tokens", tokens, backend)
            have = None if None in haves else min(haves)
            if have is None or have >= want:
                return have is not None
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def settle(self, limit_s: float) -> bool:
        """Wait until no save or load of ATOM's is left in any rank's worker (queued on
        its KV threads or running), at most ``limit_s``; whether none was. Steps
        nothing: what ATOM reports meanwhile is unchanged. A worker that cannot count
        them waits the whole ``limit_s``, as a host that sends nothing for that long."""
        deadline = time.monotonic() + limit_s
        while True:
            pending = self.link.each("kv_work_pending")
            if None in pending:
                time.sleep(max(0.0, deadline - time.monotonic()))
                return False
            if not any(pending):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    def _client_abort(self) -> None:
        """An abort armed by ``FaultSpec.abort_loading``, through ATOM's own handler of a
        client's ``abort_request`` (between steps, as ATOM's busy loop runs utility
        commands)."""
        seq, self.abort_next = self.abort_next, None
        if seq is None:
            return
        from atom.model_engine.engine_utility import EngineUtilityHandler

        handler = EngineUtilityHandler(
            self.runner_mgr, self.output_queue, self.label, self.scheduler
        )
        handler._handle_abort_request({"req_id": seq.id})
        name = self.names[seq.id]
        self.aborted.add(name)
        self.log.record("fault", req_id=name, injector="abort_during_load", aborted=True)

    def _collect_outputs(self) -> None:
        while not self.output_queue.empty():
            item = self.output_queue.get_nowait()
            if isinstance(item, tuple):  # ("STREAM", ...) or ("READY", None)
                continue
            for seq in item:
                name = self.names.get(seq.id)
                if name is not None and name not in self.aborted:  # nothing to answer
                    tokens = [int(t) for t in seq.completion_token_ids]
                    # What the request's usage reports as cached (HBM and tier hits).
                    cached = int(getattr(seq, "prefix_cache_hit_tokens", 0) or 0)
                    self.log.record("output", req_id=name, tokens=tokens, cached=cached)

    def shut_down(self) -> None:
        """ATOM's engine loop has exited (a shutdown): what runs on its way out
        (``_drain_kv_work_at_exit``, when this ATOM has it), then what it still holds."""
        drain = getattr(self, "_drain_kv_work_at_exit", None)
        if drain is not None:
            drain()
        self._collect_outputs()
        self.quiescent()

    def quiescent(self) -> None:
        """What this engine still holds now that its run has nothing left."""
        bm = self.scheduler.block_manager
        pool = getattr(bm, "kv", None)
        stats: dict[str, Any] = getattr(self.connector, "get_statistics", lambda: {})() or {}
        used = int(getattr(pool, "num_used", 0) or 0) if pool is not None else 0
        held: dict[str, Any] = dict(  # data of the record: never its op or req_id
            hbm_blocks=used - _checkpoint_units(bm),
            loads=int(stats.get("loads_pending", 0)),
            saves=int(stats.get("saves_pending", 0)),
            deferred=len(getattr(self.scheduler, "deferred_free_blocks", {}) or {}),
            unfinished=int(self.scheduler.get_num_unfinished_requests()),
        )
        # The tier's pins live in the workers' lmcache engines: a pin nobody releases
        # keeps its chunks from eviction for the process's life.
        pins = _total(self.link.each("lookup_pins"))
        if pins is not None:
            held["lookup_pins"] = int(pins)
        # Where lmcache's PinMonitor force-unpinned chunks: those whose pin count a
        # later unpin took below zero (each such unpin frees the chunk once more).
        below = _total(self.link.each("below_zero_pins"))
        if below is not None:
            held["pins_below_zero"] = below
        # Where a store's copy out of the KV blocks failed: chunks lmcache allocated for
        # it that its CPU pool neither holds nor freed (none expected: lmcache's
        # TensorMemoryObj.__del__ frees them once the failed store's objects are dropped).
        unowned = _total(self.link.each("unowned_chunks"))
        if unowned is not None:
            held["unowned_chunks"] = unowned
        self.log.record("quiescent", engine=self.spec.name, **held)


def _checkpoint_units(bm: Any) -> int:
    """PAGE units of the pool that hold ATOM's own state checkpoints (a DSV4 model
    with the HBM prefix cache on: ``PageUnitCheckpointStore``), ready and read by no
    restore: the prefix cache's content, as a freed block's hashed pages are, held by
    no request. A checkpoint still copying or pinned at quiescence counts as held."""
    coordinator = getattr(bm, "paged_state_checkpoints", None)
    records = getattr(getattr(coordinator, "store", None), "records", None) or {}
    return sum(len(r.unit_ids) for r in records.values() if r.state == "READY" and not r.pin_count)


def _total(per_rank: list[int | None]) -> int | None:
    """The ranks' counts summed; None when no rank keeps one."""
    known = [int(n) for n in per_rank if n is not None]
    return sum(known) if known else None


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
    "_drain_kv_work_at_exit",
)


def _bind_engine_core(cls: type) -> None:
    """Give the stand-in ATOM's own ``EngineCore`` step methods (functions of the class,
    called with this object as ``self``). Raises when this ATOM lacks the step."""
    from atom.model_engine.engine_core import EngineCore

    missing = [m for m in _STEP_REQUIRED if not hasattr(EngineCore, m)]
    if missing:
        raise RuntimeError(f"this ATOM's EngineCore lacks {', '.join(missing)}")
    for m in _STEP_REQUIRED + _STEP_OPTIONAL:
        # A class that has the method already keeps it (a pipeline head has ATOM's
        # PPEngineCoreProc's own).
        if hasattr(EngineCore, m) and not hasattr(cls, m):
            setattr(cls, m, getattr(EngineCore, m))


def _per_req_cache(config: Any) -> bool:
    """Whether ATOM builds this model's sequences with a per-request state slot: its
    own rule (``llm_engine.InputOutputProcessor``, by ``model_type``), where it has
    one."""
    try:
        from atom.model_engine.llm_engine import InputOutputProcessor
    except ImportError:
        return False
    types = getattr(InputOutputProcessor, "_per_req_cache_model_types", None)
    return types is not None and config.hf_config.model_type in types()
