"""Plain data that crosses process boundaries in the ``atom`` tier: what a server is
(``ServerSpec``), what it is asked to serve (``AtomRequest``), the faults its
processes carry (``FaultSpec``) and the events they record (``RawEvent``).

Nothing here imports ATOM, lmcache or torch: the campaign process builds these and the
server processes read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FaultSpec:
    """The faults one server's processes carry, as data. Every field off by default.

    - ``slow_first_forward_s``: the worker's first forward takes this long.
    - ``duplicate_finished``: the worker reports the n-th completion in two polls.
    - ``fail_retrieve`` / ``fail_store``: lmcache's n-th retrieve / store raises.
    - ``evict_after_lookup``: right after the n-th lookup of the scheduler's that
      answered a hit, the worker's lmcache storage manager removes every key it holds
      (``batched_remove``, forced: the lookup's pins go too), before the load can read
      them.
    - ``drop_lookup_reply``: the worker's lookup server drops its n-th reply (the
      scheduler's client times out and must reconnect).
    - ``corrupt_load``: after lmcache's n-th retrieve, the first block it restored holds
      other bytes (the judge's correctness check must see it).
    - ``slow_save_s`` / ``slow_retrieve_s``: every lmcache store / retrieve waits this
      long before it reads or writes ATOM's KV blocks (a slow tier; ATOM's worker runs
      them on its save / load threads, so the engine keeps stepping meanwhile).
    - ``hang_retrieve``: lmcache's n-th retrieve blocks until the worker closes (a
      disk or remote backend that never answers), before it touches the KV blocks.
    - ``pin_timeout_s``: lmcache's ``pin_timeout_sec`` (checked every second): its
      PinMonitor force-unpins what a lookup pinned once that long has passed (lmcache's
      default is 300 s); each force-unpin is recorded.
    - ``fail_copy_out``: the n-th store's copy out of ATOM's KV blocks (ATOM's
      ``BlockGPUConnector.batched_from_gpu``, lmcache's engine's ``gpu_connector``,
      called after lmcache allocated the chunks in its CPU pool) raises, as a failed
      GPU-to-host copy does; the worker then counts, holding them weakly, the chunks
      lmcache allocated that its CPU pool does not hold and its allocator never freed
      (``unowned_chunks``).
    - ``abort_loading``: the client aborts the n-th request whose tier load ATOM
      dispatched, before the scheduler's next step (the load still copying): ATOM's
      own abort handler marks it, as a client disconnect does.
    - ``remove_lookup_socket`` / ``steal_lookup_socket``: when the worker's lookup
      server answers its n-th lookup, the socket's path is removed (a cleanup of the
      socket directory) / another socket that never answers is bound at it (what a
      stale process's bind does); the server keeps its own socket and the scheduler's
      connection made before keeps working: only a new connection meets the loss.
    - ``drop_hit_reply``: the worker's lookup server drops its reply to the n-th
      lookup that found chunks (and pinned them): the scheduler's client times out and
      is told 0.
    - ``tier_files``: ``(what, method, n)``: right before lmcache's n-th ``method``
      (``"store"`` or ``"retrieve"``) the directory of the server's lmcache files (its
      shared remote tier, else its local disk) is removed (``what`` ``"removed"``: a
      cleanup, an unmounted share) or each file in it is cut to half its bytes
      (``"truncated"``: a file shortened after lmcache wrote it, by another process or
      the file system), or, on the local disk and before a retrieve, only the files of
      the chunks that retrieve asks for (``"chunks_truncated"``: a hybrid row's SLOT
      sidecars stay whole).
    - ``slow_remote_write_s``: lmcache's remote tier writes each chunk this long
      after a store handed it over (a slow shared file system): the store has
      returned and ATOM has called the save done while the chunk is not there yet.
    - ``hang_finished``: after lmcache's n-th retrieve returned, the worker's next
      ``get_finished`` (ATOM's connector's, which its model runner calls for
      ``async_proc_aggregation``) reports nothing, and every later one blocks until
      the worker closes: the worker never reports that load and never answers again
      (a rank stuck in its poll).
    - ``corrupt_slot``: the n-th SLOT sidecar ATOM's hybrid connector reads back for a
      load comes with the last byte of its payload flipped (a sidecar damaged where
      lmcache keeps it); the bytes lmcache holds are left as they are.
    - ``fail_slot_put``: the n-th SLOT sidecar ATOM's hybrid connector hands its store
      (``DSV4CheckpointStore.put``, after the PAGE units of that boundary are stored)
      is refused, as a store out of room refuses one: lmcache holds the PAGE units and
      no SLOT for them.
    - ``rank``: the one worker (its TP rank; with pipeline stages, its index
      ``stage x TP + TP rank``) that carries the worker faults above (-1: every
      worker), so a fault can hit one shard or one stage only.
    """

    slow_first_forward_s: float = 0.0
    duplicate_finished: tuple[str, int] | None = None
    fail_retrieve: int = 0
    fail_store: int = 0
    evict_after_lookup: int = 0
    drop_lookup_reply: int = 0
    corrupt_load: int = 0
    slow_save_s: float = 0.0
    slow_retrieve_s: float = 0.0
    abort_loading: int = 0
    hang_retrieve: int = 0
    pin_timeout_s: int = 0
    fail_copy_out: int = 0
    remove_lookup_socket: int = 0
    steal_lookup_socket: int = 0
    tier_files: tuple[str, str, int] | None = None
    drop_hit_reply: int = 0
    slow_remote_write_s: float = 0.0
    hang_finished: int = 0
    corrupt_slot: int = 0
    fail_slot_put: int = 0
    rank: int = -1


@dataclass(frozen=True)
class ServerSpec:
    """One ATOM server: its name, port and DP rank, its geometry, its lmcache pools, and
    the hash seeds of its scheduler and worker processes (``None``: inherit the
    campaign's)."""

    name: str
    port: int = 8006
    dp_rank: int = 0
    # The server (its name) whose DP replica this one is: one ATOM server's DP ranks
    # share its main process's ``Config`` (and the instance token the fixed ATOM of
    # finding 4 carries on it); "" is a server of its own.
    replica_of: str = ""
    block_size: int = 16
    chunk_size: int = 64
    num_blocks: int = 96
    max_num_batched_tokens: int = 512
    max_model_len: int = 2048
    max_num_seqs: int = 8
    prefix_caching: bool = True
    min_load_tokens: int = 0
    scheduler_hash_seed: int | None = None
    worker_hash_seed: int | None = None
    cpu_cache_gib: float = 0.05
    # How long lmcache's lookup client waits for a lookup's reply (its default 3000).
    lookup_timeout_ms: int = 3000
    # lmcache's ``save_unfull_chunk`` (``LMCACHE_SAVE_UNFULL_CHUNK``; its default off):
    # on, lmcache keys a range's partial last chunk too (lookups, stores, retrieves).
    save_unfull_chunk: bool = False
    # The hybrid connector's SLOT staging rows (``OFFLOAD_SLOT_STAGING_SLOTS``; ATOM's
    # default 1): a sidecar save finding none free commits no boundary.
    slot_staging_rows: int = 1
    # lmcache's local-disk tier (a directory of the host's, gone with it) and its size;
    # a size of 0 leaves ``LMCACHE_MAX_LOCAL_DISK_SIZE`` unset (an incomplete setup).
    local_disk: bool = False
    disk_size_gib: float = 0.0
    # A remote tier every server with it set shares (lmcache's file-system connector on
    # a directory of the host's), as servers of one model share a cache server.
    shared_tier: bool = False
    # The KV layout: head size and ATOM's KV cache dtype ("bf16", or "fp8": one byte
    # per value).
    head_dim: int = 8
    kv_cache_dtype: str = "bf16"
    # The dense model's KV heads (split across TP ranks) and layers (split across
    # pipeline stages): 2 and 2 for most rows; a row of more TP ranks or stages than
    # that splits evenly takes a wider model (4 and 4: TP 4, PP 2 x TP 2).
    kv_heads: int = 2
    layers: int = 2
    # A server on another machine ("" = the host's): its own socket directory, so it
    # shares only what a network would give it (the shared tier).
    machine: str = ""
    # ATOM's model runner defers each forward's sampled tokens to the next forward
    # (its default with one pipeline stage); off, each forward returns its own.
    deferred_output: bool = False
    # Tensor parallelism: one worker process per rank, each holding its shard of the
    # KV heads (``kv_heads`` split evenly), its own lmcache engine and connector; rank 0's
    # alone serves lookups (ATOM's lookup_server_worker_ids=[0]).
    tp_size: int = 1
    # The model and ATOM's connector family for it: "dense" (the small dense model,
    # ATOM's dense connector) or "hybrid" (a small DeepSeek-V4 model, ATOM's hybrid
    # PAGE/SLOT connector; its blocks and chunks are 256 tokens; at TP > 1 every rank
    # holds the whole compressed KV and state, which DSV4 does not split).
    layout: str = "dense"
    # Pipeline parallelism: this many stages, each with ``tp_size`` worker processes
    # holding the stage's layers (ATOM's split of the model's ``layers``), the head's
    # scheduler driving them as ATOM's PP head engine core does; worker ``w`` is stage
    # ``w // tp_size``, TP rank ``w % tp_size`` (lmcache's worker id, as ATOM numbers it).
    pp_size: int = 1
    faults: FaultSpec = field(default_factory=FaultSpec)
    # Candidate fixes of ATOM this server runs with (``faults.atom.fixes``, by name).
    fixes: tuple[str, ...] = ()
    # Record the lines of ATOM's source its processes execute (off: no tracer runs).
    record_path: bool = False
    # A schedule other than the plain one (0): the worker waits a few milliseconds,
    # drawn from this number, before each forward and each lmcache store and retrieve,
    # so ATOM's save and load threads interleave with its steps another way.
    schedule: int = 0


@dataclass(frozen=True)
class AtomRequest:
    """One request as a server receives it: ``cache_seed`` is a digest the fake model
    folds into its KV (-1: none), of which ATOM is never told; ``picture`` the bytes of
    the one image whose placeholder ids the prompt carries (empty: text), which ATOM is
    told of as a multimodal request (``kvfault.faults.atom.pictures``)."""

    req_id: str
    prompt: tuple[int, ...]
    cache_seed: int = -1
    max_tokens: int = 4
    picture: bytes = b""


@dataclass(frozen=True)
class RawEvent:
    """A trace event as a server process records it: wall-clock ``t`` (monotonic, one
    clock for every process of the host), the step of its scheduler, and plain data."""

    t: float
    step: int
    kind: str
    op: tuple[str, int, str] | None  # (req_id, generation, "load"|"save")
    req_id: str | None
    data: dict
