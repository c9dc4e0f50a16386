"""The real LMCache tier: a ``kvfault.reference.interfaces.Tier`` over a running lmcache MP server.

Driven through lmcache's own client classes (``RequestClientFactory`` -> its ZMQ
``RequestClient``, ``IPCCacheServerKey``, ``RegisterEngineDrivenContextPayload`` and the
SHM ``EngineDrivenContext`` that maps the server's pool), in lmcache's *engine-driven*
transfer mode: the server hands out slots of its POSIX shared-memory pool, the client
copies CPU tensors in or out, then commits.

What this tier promises (and where it differs from ``kvfault.fakes.memory_tier``):

- Keys: lmcache's own prefix chain (blake3 over the previous hash and the packed chunk)
  over the tier ids; a partial chunk is neither stored nor hit. The ids go to the server
  unchanged: ids outside ``[0, 2**32)`` or a start off the chunk grid make its handler
  raise, and then it never replies (the ticket stays pending; the worker's deadline
  handles it).
- ``lookup`` is synchronous (the scheduler's view): lookup + prefetch-status polling +
  releasing the lookup's read locks, bounded by ``lookup_timeout_s``. A lookup that gets
  no answer in time is reported as a miss (recomputing is always correct) and counted
  in ``lookup_timeouts``; it never hangs.
- ``submit_retrieve`` / ``submit_store`` only send the first request; ``poll`` advances
  the operation by at most one finished reply per call and never blocks; ``wait``
  blocks (on the pending reply, not by spinning) until the reply or a timeout. A retrieve
  first looks up (lmcache only reads objects a lookup has read-locked), so a chunk
  evicted after the scheduler's lookup turns into a failed retrieve, not a wrong page.
- Pages: the simulator's pages are 64-bit int fingerprints, one per HBM block. Each
  becomes a block of a realistic KV layout ``[2, layers, block_size, hidden]`` filled
  with a cheap deterministic pattern seeded by the fingerprint, with the fingerprint's
  16 bytes written into the block's first row. A retrieve decodes the fingerprint and
  re-derives the whole block: any byte that differs fails the retrieve
  ("page corrupted"). With ``page_format="tensor"`` pages are tensors of the block
  shape and are stored and returned as they are: a store copies each page into its
  slot's block; a retrieve copies each slot out once, into a chunk-sized block-major
  buffer, and returns its blocks as contiguous views (no copy per block). Those
  buffers are recycled once no tensor uses their memory any more (at most
  ``recycle_bytes`` of idle ones are kept), so steady retrieves write into warm memory.
- State images (hybrids) are kept only on the chunk grid (``state_grid == "chunk"``),
  as the MP connector does; images at other positions are silently not stored. Each
  image is one extra lmcache object, in its own namespace (model ``<model>-state``, its
  own small layout ``[2, 1, chunk_size, state_dim]``), keyed by ``chunk_size`` ids
  derived from the state key. It is stored after the KV chunks of the same save; a
  retrieve with ``state_key`` fetches it after the KV.
- Eviction is the server's (LRU at a memory watermark, asynchronous), not a chunk
  count. When the pool is full the server reserves nothing for a new chunk and says
  "nothing to write" -- the same answer as "already held". With ``verify_stores``
  (default) the tier then looks the range up and fails the store ("store not kept")
  instead of acknowledging data it does not hold.

Which requests each operation sends, and in which order, is ``lmcache_requests``
(``LMCacheTier``'s base class); this module sets the tier up, drives those operations
(blocking for a lookup, one answer per ``poll`` for a ticket) and closes it.

Importing this module imports neither torch nor lmcache; the constructor does.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Sequence

from kvfault.reference.interfaces import LookupQuery, LookupResult, Page, State, TierReply
from kvfault.reference.tiers.lmcache_client import ClientContext, close_client, open_client
from kvfault.reference.tiers.lmcache_pages import (
    _HEADER_INT16,
    CopyThreads,
    KVLayout,
    PageFormat,
    _Recycler,
)
from kvfault.reference.tiers.lmcache_requests import _BACKOFF, Step, _Requests
from kvfault.reference.types import Geometry, OperationId, StateGrid

BACKOFF_S = 0.001  # pause between prefetch-status rounds of a blocking wait or lookup


class LMCacheTierError(RuntimeError):
    """The tier could not connect to or register with the server."""


@dataclass
class LMCacheTicket:
    """One submitted retrieve or store. ``stage`` names the request it waits on."""

    op: OperationId
    kind: str
    gen: Step | None
    waiting: Any = None
    stage: str = "submitted"
    reply: TierReply | None = None
    submitted_at: float = field(default_factory=time.monotonic)
    rpcs: list[str] = field(default_factory=list)


class LMCacheTier(_Requests):
    """A ``Tier`` backed by a real lmcache MP server (see the module docstring)."""

    state_grid: StateGrid = "chunk"

    def __init__(
        self,
        url: str,
        geometry: Geometry,
        *,
        layout: KVLayout | None = None,
        state_dim: int = 8,
        model_name: str = "kvfault",
        page_format: PageFormat = "fingerprint",
        lookup_timeout_s: float = 10.0,
        connect_timeout_s: float = 30.0,
        rng_seed: int | None = None,
        verify_stores: bool = True,
        recycle_bytes: int = 1 << 30,
        client_context: ClientContext | None = None,
    ):
        try:
            import torch
            from lmcache.v1.distributed.api import MemoryLayoutDesc
            from lmcache.v1.multiprocess.custom_types import (
                IPCCacheServerKey,
                RegisterEngineDrivenContextPayload,
            )
            from lmcache.v1.multiprocess.transfer_context.base import (
                EngineDrivenContextMetadata,
                create_engine_driven_context,
            )
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LMCacheTierError(
                f"lmcache is not importable ({exc}); install the lmcache extra: "
                "pip install -c constraints/ci.txt '.[lmcache]' (see README)"
            ) from exc
        if page_format not in ("fingerprint", "tensor"):
            raise ValueError(f"page_format must be fingerprint or tensor, got {page_format!r}")
        if state_dim < _HEADER_INT16:
            raise ValueError(f"state_dim must be >= {_HEADER_INT16}, got {state_dim}")
        self._torch = torch
        self._Key = IPCCacheServerKey
        self.url = url
        self.geometry = geometry
        self.chunk_size = geometry.chunk_size
        self.block_size = geometry.block_size
        self.layout = layout or KVLayout()
        self.state_dim = state_dim
        self.model_name = model_name
        self.state_model_name = f"{model_name}-state"
        self.page_format: PageFormat = page_format
        self.lookup_timeout_s = lookup_timeout_s
        self.lookup_timeouts = 0
        self.verify_stores = verify_stores
        self.last_lookup_error = ""
        self._dtype = getattr(torch, self.layout.dtype)
        self._rng = random.Random(rng_seed)
        self._rid = itertools.count()
        self._rid_prefix = f"kvf-{os.getpid()}-{self._rng.getrandbits(32):08x}"
        self._arange_cache: dict[int, Any] = {}
        self._closed = False
        self.close_problem = ""  # what did not close cleanly (lmcache_client.close_client)
        per_chunk = self.chunk_size // self.block_size
        buffer_shape = (per_chunk, *self.block_shape())
        self._recycler = _Recycler(
            torch, buffer_shape, self._dtype,
            keep=recycle_bytes // max(1, self.layout.chunk_bytes(self.chunk_size)),
        )  # fmt: skip
        # Tensor pages: as many copy threads as torch's own copies use (lmcache's client
        # copies with torch); a store splits each chunk's page gather over them.
        # Fingerprint pages are encoded in place: one thread, and none started.
        threads = torch.get_num_threads() if page_format == "tensor" else 1
        self._copy_threads = CopyThreads(threads)

        self.client = open_client(url, client_context)
        self._contexts: list[Any] = []
        self._instances: list[int] = []
        try:
            server_chunk = self._setup_answer(
                self.client.get_chunk_size(), "get_chunk_size", connect_timeout_s
            )
            if int(server_chunk) != self.chunk_size:
                raise LMCacheTierError(
                    f"server at {url} uses chunk size {server_chunk}, geometry says "
                    f"{self.chunk_size}"
                )
            kv_shape = (2, self.layout.num_layers, self.chunk_size, self.layout.hidden)
            st_shape = (2, 1, self.chunk_size, state_dim)
            self._kv_iid, self._kv_ctx = self._register(
                RegisterEngineDrivenContextPayload, EngineDrivenContextMetadata,
                MemoryLayoutDesc, create_engine_driven_context, model_name,
                self.layout.num_layers, self.layout.hidden, kv_shape, connect_timeout_s,
            )  # fmt: skip
            self._st_iid, self._st_ctx = self._register(
                RegisterEngineDrivenContextPayload, EngineDrivenContextMetadata,
                MemoryLayoutDesc, create_engine_driven_context, self.state_model_name,
                1, state_dim, st_shape, connect_timeout_s,
            )  # fmt: skip
        except Exception as exc:
            self.close()
            if isinstance(exc, LMCacheTierError):
                raise
            raise LMCacheTierError(f"cannot set up the lmcache tier at {url}: {exc!r}") from exc

    def _setup_answer(self, future: Any, what: str, timeout: float) -> Any:
        """The answer to a setup request, or ``LMCacheTierError`` naming the request
        and the bound when none came within ``timeout`` seconds."""
        if not future.wait(timeout=timeout):
            raise LMCacheTierError(
                f"no answer to {what} from the lmcache server at {self.url} within "
                f"{timeout:.3g}s (tier setup)"
            )
        return future.result(timeout=0)

    def _register(
        self, Payload: Any, Meta: Any, LayoutDesc: Any, make_ctx: Callable[..., Any],
        model: str, layers: int, hidden: int, shape: tuple[int, ...], timeout: float,
    ) -> tuple[int, Any]:  # fmt: skip
        torch = self._torch
        iid = self._rng.randrange(1, 2**31)
        payload = Payload(
            instance_id=iid, model_name=model, world_size=1, block_size=self.block_size,
            num_layers=layers, hidden_dim_size=hidden, dtype_str=self.layout.dtype,
            use_mla=False,
        )  # fmt: skip
        resp = self._setup_answer(
            self.client.register_kv_cache_engine_driven_context(payload),
            f"register_kv_cache_engine_driven_context ({model})",
            timeout,
        )
        self._instances.append(iid)
        if not resp.shm_name or resp.pool_size <= 0:
            raise LMCacheTierError(
                "the server advertises no shared-memory pool (start it with "
                "--shm-name and --no-l1-use-lazy, engine_driven mode)"
            )
        meta = Meta(
            layout_desc=LayoutDesc(shapes=[torch.Size(shape)], dtypes=[self._dtype]),
            block_size=self.block_size,
            use_mla=False,
        )
        ctx = make_ctx(meta, self.client, timeout, resp.shm_name, resp.pool_size)
        if not hasattr(ctx, "_build_slot_tensors"):
            raise LMCacheTierError("lmcache fell back to pickle transport; SHM required")
        self._contexts.append(ctx)
        return iid, ctx

    # -- lookup -------------------------------------------------------------------------
    def lookup(self, query: LookupQuery) -> LookupResult:
        """Contiguous-prefix KV hit (a multiple of the chunk size) and the on-grid state
        candidates held. Blocks at most ``lookup_timeout_s`` per server round; a server
        that does not answer in time gives a miss (counted in ``lookup_timeouts``)."""
        ids = query.tier_ids
        full = len(ids) - len(ids) % self.chunk_size
        hit = 0
        if full:
            chunks = self._run_blocking(self._lookup_gen(self.model_name, ids[:full], full))
            hit = (chunks or 0) * self.chunk_size
        states: list[int] = []
        for pos, key in query.state_candidates:
            if pos <= 0 or pos % self.chunk_size:
                continue  # never stored off the chunk grid
            sids = self.state_ids(key)
            if self._run_blocking(self._lookup_gen(self.state_model_name, sids, len(sids))):
                states.append(pos)
        return LookupResult(kv_hit=hit, state_positions=tuple(states))

    def _run_blocking(self, gen: Generator[Any, Any, Any]) -> Any:
        deadline = time.monotonic() + self.lookup_timeout_s
        value: Any = None
        try:
            while True:
                waiting = gen.send(value)
                if waiting is _BACKOFF:
                    time.sleep(BACKOFF_S)
                    value = None
                    continue
                if not waiting.wait(timeout=max(0.0, deadline - time.monotonic())):
                    gen.close()
                    self.lookup_timeouts += 1
                    self.last_lookup_error = "lookup got no reply in time"
                    return None
                value = waiting.result(timeout=0)
        except StopIteration as stop:
            return stop.value
        except Exception as exc:  # the server answered with an error: treat as a miss
            self.last_lookup_error = f"{type(exc).__name__}: {exc}"
            return None

    # -- asynchronous operations -----------------------------------------------------
    def submit_retrieve(
        self,
        op: OperationId,
        tier_ids: Sequence[int],
        start: int,
        end: int,
        state_key: int | None,
    ) -> LMCacheTicket:
        """Fetch the pages of blocks ``[start, end)`` (and the state image named
        ``state_key``). The whole covering chunks are transferred."""
        ticket = LMCacheTicket(op, "retrieve", self._retrieve_gen(tier_ids, start, end, state_key))
        self._advance(ticket)
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
        """Store the full chunks of ``[start, end)`` (``pages`` are the blocks from
        ``start``) and the state images on the chunk grid."""
        ticket = LMCacheTicket(
            op, "store", self._store_gen(tier_ids, start, end, list(pages), list(states))
        )
        self._advance(ticket)
        return ticket

    def poll(self, ticket: object) -> TierReply | None:
        """The reply once terminal, else None. Never blocks; a reply that never comes
        leaves the ticket pending forever (``ticket.stage`` says on which request)."""
        assert isinstance(ticket, LMCacheTicket)
        if ticket.reply is None:
            self._advance(ticket)
        return ticket.reply

    def wait(self, ticket: object, timeout: float) -> TierReply | None:
        """Block until ``ticket`` is terminal and return its reply, or return None when
        it is still pending after ``timeout`` seconds (as ``poll`` would; the ticket
        stays valid and can be polled or waited on again).

        Same replies as calling ``poll`` until it answers, but without spinning: it
        blocks on the pending request's future (releasing the GIL that lmcache's I/O
        thread needs to deliver the reply) and sleeps ``BACKOFF_S`` between
        prefetch-status rounds. ``timeout <= 0`` is one ``poll``. Not thread-safe, like
        every other call into the tier."""
        assert isinstance(ticket, LMCacheTicket)
        deadline = time.monotonic() + timeout
        self._advance(ticket)
        while ticket.reply is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if ticket.waiting is _BACKOFF:
                time.sleep(min(BACKOFF_S, left))
            elif ticket.waiting is not None and not ticket.waiting.wait(timeout=left):
                return None
            self._advance(ticket)
        return ticket.reply

    def _advance(self, t: LMCacheTicket) -> None:
        """Run ``t`` until it waits on an unanswered request or finishes."""
        if t.gen is None:
            return
        while t.reply is None:
            try:
                if t.waiting is None:
                    nxt = t.gen.send(None)
                elif t.waiting is _BACKOFF:
                    nxt = t.gen.send(None)
                else:
                    if not t.waiting.query():
                        return
                    try:
                        value = t.waiting.result(timeout=0)
                    except Exception as exc:  # the server answered with an error
                        nxt = t.gen.throw(exc)
                    else:
                        nxt = t.gen.send(value)
            except StopIteration as stop:
                t.reply = stop.value
                break
            except Exception as exc:
                t.reply = TierReply(ok=False, error=f"{type(exc).__name__}: {exc}")
                break
            t.waiting = nxt
            if nxt is _BACKOFF:
                t.stage = "backoff"
                return  # ask again on the next poll: at most one new round per poll
            t.stage = getattr(nxt, "_kvf_stage", "rpc")
            t.rpcs.append(t.stage)
        t.gen = None
        t.waiting = None

    # -- teardown -----------------------------------------------------------------------
    def close(self) -> None:
        """Unregister from the server (without waiting) and close the client."""
        if self._closed:
            return
        self._closed = True
        threads = getattr(self, "_copy_threads", None)
        if threads is not None:
            threads.close()
        client = getattr(self, "client", None)
        for iid in getattr(self, "_instances", []):
            try:
                client.unregister_kv_cache_engine_driven_context(iid)  # type: ignore[union-attr]  # None raises: caught below
            except Exception:
                pass
        for ctx in getattr(self, "_contexts", []):
            try:
                ctx.close()
            except Exception:
                pass
        if client is not None:
            # Not lmcache's own close: its order can wedge every client of the process.
            self.close_problem = close_client(client)

    def __enter__(self) -> LMCacheTier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
