"""The device restore path: a pinned host pool, device KV pages, and a copy engine that
restores scattered blocks from the pool into the pages as one batched operation.

Device-agnostic through ``torch.cuda`` (CUDA and HIP builds of torch). The engine never
blocks: it enqueues on its own side stream, records an event as the fence, and reports
completion only through ``event.query()``.

How a restore moves its bytes (``TorchCopyEngine.method``, fixed per engine because it
depends on the page size; every way is one batched operation, never a loop per block):

- ``dma``: one ``cudaMemcpyBatchAsync`` call queues every block's copy on the copy
  engines (CUDA runtime 12.8 and up). Best for large pages (>= 256 KiB by default).
- ``mapped``: the pinned pool is viewed as device memory (unified addressing: pinned host
  memory is readable by the device at its host address), and ONE gather kernel reads each
  source block across the bus and writes it into its destination page: a Triton kernel
  where Triton is installed, else ``index_select`` into a device buffer plus a
  device-local ``index_copy_``. Best for small pages; the fast path on HIP too.
- ``staged``: where the device cannot map the pool. The host gathers the blocks into a
  pinned staging buffer, one host-to-device DMA moves it, and one ``index_copy_``
  scatters it. Slower (a host memcpy first), still one transfer. Host tensors that are
  not pool pages always go this way.

Each path is probed once at construction (bytes compared), so a device or runtime that
cannot do it falls back instead of failing a restore.

Only this module imports torch; the rest of ``reference/`` never does.
"""

from __future__ import annotations

import ctypes
import sys
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from reference.errors import RestoreFenceError
from reference.types import OperationId

Method = Literal["auto", "dma", "mapped", "staged"]
Gather = Literal["auto", "triton", "index"]

# From this page size up, "auto" restores by batched DMA where the runtime has it: on an
# H200 (PCIe 5) batched DMA moved 89-99% of a contiguous copy end to end at 256 KiB and
# 2 MiB pages but ~55% at 32 KiB (host time in the batch call, ~2.7 us a copy), where the
# gather kernel moved ~85% (docs/gpu_tier.md).
DMA_MIN_BLOCK_BYTES = 256 * 1024

# __cuda_array_interface__ typestrs of the word types a block may be moved as.
_TYPESTR = {
    torch.int64: "<i8",
    torch.int32: "<i4",
    torch.int16: "<i2",
    torch.uint8: "|u1",
    torch.complex128: "<c16",
}


def device_available() -> bool:
    """True when torch sees a CUDA or HIP device."""
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def device_backend() -> str:
    """``"hip"`` on a ROCm build of torch, ``"cuda"`` otherwise."""
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def word_dtype(row_bytes: int, widest: torch.dtype = torch.int64) -> torch.dtype:
    """The widest word type, up to ``widest``, that divides a row of ``row_bytes``.

    A block moves as words of this type: the bytes are copied, never interpreted.
    """
    order = [torch.complex128, torch.int64, torch.int32, torch.int16, torch.uint8]
    width = _itemsize(widest)
    for dt in order:
        if _itemsize(dt) <= width and row_bytes % _itemsize(dt) == 0:
            return dt
    return torch.uint8


def _itemsize(dt: torch.dtype) -> int:
    return torch.empty((), dtype=dt).element_size()


class _MappedArray:
    """A ``__cuda_array_interface__`` over pinned host memory, so torch sees it as a
    device tensor at the same address (unified virtual addressing)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: torch.dtype):
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": shape,
            "typestr": _TYPESTR[dtype],
            "strides": None,
            "version": 3,
        }


def map_pinned(host: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """A device tensor aliasing the pinned, contiguous ``host`` tensor, or None where the
    device cannot read it in place (no unified addressing, an old torch, a HIP build
    without the interface). The caller keeps ``host`` alive as long as the view."""
    if not (host.is_pinned() and host.is_contiguous()) or host.dtype not in _TYPESTR:
        return None
    try:
        view = torch.as_tensor(
            _MappedArray(host.data_ptr(), tuple(host.shape), host.dtype), device=device
        )
    except Exception:  # noqa: BLE001 - any failure means: no mapped path here
        return None
    if view.data_ptr() != host.data_ptr() or view.device.type != "cuda":
        return None
    return view


@dataclass(frozen=True, eq=False)
class HostPage:
    """A handle to one slot of a ``PinnedHostPool``. It goes stale when its slot is freed
    (an eviction); the copy engine refuses a stale page at enqueue."""

    pool: PinnedHostPool
    slot: int
    generation: int

    @property
    def live(self) -> bool:
        return self.pool.generation(self.slot) == self.generation

    @property
    def tensor(self) -> torch.Tensor:
        """The slot's pinned storage (a view; valid while the page is live)."""
        return self.pool.buffer[self.slot]


class HostPageBatch(Sequence[HostPage]):
    """Pages of one pool held as two int64 arrays (slots, generations): what a tier
    built on ``PinnedHostPool`` returns for a retrieve. The copy engine checks and
    indexes a batch without a Python loop per block; indexing yields ``HostPage``s."""

    def __init__(self, pool: PinnedHostPool, slots: torch.Tensor, generations: torch.Tensor):
        if slots.shape != generations.shape or slots.dim() != 1:
            raise ValueError("slots and generations must be 1-d and of one length")
        self.pool = pool
        self.slots = slots.to(torch.int64)
        self.generations = generations.to(torch.int64)

    def __len__(self) -> int:
        return self.slots.numel()

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return HostPageBatch(self.pool, self.slots[i], self.generations[i])
        return HostPage(self.pool, int(self.slots[i]), int(self.generations[i]))

    def all_live(self) -> bool:
        """No slot of the batch was freed since the batch was taken (two tensor ops)."""
        return torch.equal(self.pool.generations.index_select(0, self.slots), self.generations)

    def stale(self) -> torch.Tensor:
        """Positions of pages whose slot was freed since the batch was taken."""
        current = self.pool.generations.index_select(0, self.slots)
        return torch.nonzero(current != self.generations).flatten()


class PinnedHostPool:
    """Tier-side pinned host memory: ``num_slots`` pages of ``page_shape`` and ``dtype``.

    ``put`` copies a page in and returns a live ``HostPage``; ``free`` makes every handle
    to that slot stale. Slots are handed out in FIFO order so a freed slot is not reused
    at once (a stale handle then still points at unrelated but valid memory).
    """

    def __init__(
        self,
        num_slots: int,
        page_shape: tuple[int, ...],
        dtype: torch.dtype = torch.bfloat16,
    ):
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.page_shape = tuple(page_shape)
        self.dtype = dtype
        self.buffer = torch.empty((num_slots, *self.page_shape), dtype=dtype, pin_memory=True)
        self.row_bytes = self.buffer[0].numel() * self.buffer.element_size()
        self._free: deque[int] = deque(range(num_slots))
        # one counter per slot, bumped on free; a tensor so a batch checks in one op
        self.generations = torch.zeros(num_slots, dtype=torch.int64)
        self._mapped: dict[tuple[torch.dtype, str], torch.Tensor | None] = {}

    @property
    def num_slots(self) -> int:
        return self.buffer.shape[0]

    @property
    def num_free(self) -> int:
        return len(self._free)

    def generation(self, slot: int) -> int:
        return int(self.generations[slot])

    def alloc(self) -> HostPage:
        """A live page whose content is whatever the slot held; raises when full."""
        if not self._free:
            raise MemoryError(f"pinned host pool is full ({self.num_slots} slots)")
        slot = self._free.popleft()
        return HostPage(self, slot, self.generation(slot))

    def put(self, page: torch.Tensor) -> HostPage:
        """Copy ``page`` (any device, same element count) into a fresh slot.

        Blocking when ``page`` lives on a device: stores are not on the restore path.
        """
        hp = self.alloc()
        self.buffer[hp.slot].copy_(page.reshape(self.page_shape))
        return hp

    def free(self, page: HostPage) -> None:
        """Return the slot; every handle to it goes stale. Freeing a stale handle is a
        no-op (an eviction racing a release)."""
        if page.pool is not self or not page.live:
            return
        self.generations[page.slot] += 1
        self._free.append(page.slot)

    def batch(self, pages: Sequence[HostPage]) -> HostPageBatch:
        """The same pages as one ``HostPageBatch`` (generations as the handles say)."""
        if any(p.pool is not self for p in pages):
            raise ValueError("a page of another pool")
        return HostPageBatch(
            self,
            torch.tensor([p.slot for p in pages], dtype=torch.int64),
            torch.tensor([p.generation for p in pages], dtype=torch.int64),
        )

    def take(self, slots: Sequence[int]) -> HostPageBatch:
        """Live handles to ``slots`` as they are now, as one batch (no copy)."""
        idx = torch.as_tensor(slots, dtype=torch.int64).reshape(-1)
        return HostPageBatch(self, idx, self.generations.index_select(0, idx))

    def rows(self, word: torch.dtype) -> torch.Tensor:
        """The pool as ``[num_slots, words]`` host rows of ``word``."""
        return self.buffer.view(self.num_slots, -1).view(word)

    def mapped_rows(self, word: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """The pool as device-readable ``[num_slots, words]`` rows, or None (see
        ``map_pinned``). Cached per word type and device."""
        key = (word, str(device))
        if key not in self._mapped:
            self._mapped[key] = map_pinned(self.rows(word), device)
        return self._mapped[key]


class DeviceKvPages:
    """HBM: ``num_blocks`` KV pages of ``page_shape`` and ``dtype`` on a device, plus one
    recurrent-state tensor per request. Implements ``reference.interfaces.KvPages``.

    ``read`` returns a view of the page (clone it to keep a snapshot); ``write`` copies on
    the current stream.
    """

    def __init__(
        self,
        num_blocks: int,
        page_shape: tuple[int, ...],
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str | None = None,
    ):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.device = torch.device(device) if device is not None else _default_device()
        self.page_shape = tuple(page_shape)
        self.dtype = dtype
        self.num_blocks = num_blocks
        self.pages = torch.empty((num_blocks, *self.page_shape), dtype=dtype, device=self.device)
        self.row_bytes = self.pages[0].numel() * self.pages.element_size()
        self._states: dict[str, torch.Tensor] = {}

    def rows(self, word: torch.dtype) -> torch.Tensor:
        """The pages as ``[num_blocks, words]`` device rows of ``word``."""
        return self.pages.view(self.num_blocks, -1).view(word)

    def read(self, block: int) -> torch.Tensor:
        return self.pages[block]

    def write(self, block: int, page: Any) -> None:
        self.pages[block].copy_(torch.as_tensor(page).reshape(self.page_shape))

    def read_state(self, req_id: str) -> torch.Tensor | None:
        return self._states.get(req_id)

    def write_state(self, req_id: str, state: Any | None) -> None:
        if state is None:
            self._states.pop(req_id, None)
        else:
            self._states[req_id] = torch.as_tensor(state).to(self.device)


def _default_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@dataclass(eq=False)
class RestoreTicket:
    """One enqueued restore. ``event`` is its fence; ``keep`` holds what the copy still
    reads (staging buffers, index and address arrays) until the fence is observed."""

    op: OperationId
    req_id: str
    num_blocks: int
    nbytes: int
    event: Any
    state: torch.Tensor | None = None
    keep: list[Any] = field(default_factory=list)
    done: bool = False


class TorchCopyEngine:
    """Restores tier pages into ``DeviceKvPages`` on a side stream; implements
    ``reference.interfaces.CopyEngine``.

    ``enqueue`` only enqueues (it never waits on the device) and raises
    ``RestoreFenceError`` when the restore cannot be fenced: pages and blocks disagree, a
    block is out of range or repeated, a page is stale (evicted) or of the wrong size, or
    the device refused the work. ``is_complete`` polls the ticket's event and never blocks.
    A restore is ordered after the work already queued on the stream that is current at
    enqueue (the forward may still read pages being replaced).

    ``method`` (resolved once, at construction, for this page size; see the module
    docstring): ``"auto"`` takes ``dma`` for pages of ``dma_min_block_bytes`` and up
    where the runtime has batched copies, else ``mapped``, else ``staged``. Naming a
    method the device cannot do raises ``RuntimeError`` here, never at a restore.
    Construction probes the chosen path once (and compiles its kernel), synchronously.
    """

    def __init__(
        self,
        kv: DeviceKvPages,
        pool: PinnedHostPool | None = None,
        method: Method = "auto",
        gather: Gather = "auto",
        dma_min_block_bytes: int = DMA_MIN_BLOCK_BYTES,
        widest_word: torch.dtype = torch.int64,
        stream: Any | None = None,
    ):
        self.kv = kv
        self.pool = pool
        self.device = kv.device
        self.stream = stream if stream is not None else torch.cuda.Stream(device=self.device)
        self.word = word_dtype(kv.row_bytes, widest_word)
        self._kv_rows = kv.rows(self.word)
        self._dma: _BatchDma | None = None
        self._mapped: torch.Tensor | None = None
        self.gather: str | None = None  # "triton" or "index" when method is "mapped"
        if pool is not None and pool.row_bytes != kv.row_bytes:
            raise ValueError(f"pool pages are {pool.row_bytes} bytes, device pages {kv.row_bytes}")
        want_dma = method == "dma" or (method == "auto" and kv.row_bytes >= dma_min_block_bytes)
        if pool is not None and want_dma:
            self._dma = _BatchDma.load()
            if self._dma is not None and not self._probe(self._dma_rows):
                self._dma = None
        if pool is not None and self._dma is None and method in ("auto", "mapped"):
            self._mapped = pool.mapped_rows(self.word, self.device)
            if self._mapped is not None:
                self.gather = self._pick_gather(gather)
                if self.gather is None:
                    self._mapped = None
        self.method: str = "dma" if self._dma is not None else "mapped" if self.gather else "staged"
        if method not in ("auto", self.method):
            raise RuntimeError(
                f"restore method {method!r} is not available on this device "
                f"({device_backend()}, torch {torch.__version__}); use method='auto'"
            )
        self.in_flight = 0  # tickets enqueued and not yet observed complete

    # -- CopyEngine -------------------------------------------------------------------

    def enqueue(
        self,
        op: OperationId,
        pages: Sequence[Any],
        blocks: Sequence[int],
        state: Any | None,
        req_id: str,
    ) -> RestoreTicket:
        """Enqueue one restore of ``pages[i]`` into ``blocks[i]`` (and ``state`` into the
        request's state slot, published when the copy completes). Returns its ticket.

        ``pages`` is a ``HostPageBatch`` (fast: checked and indexed without a Python
        loop per block), a sequence of ``HostPage``, or host tensors of one block each
        (gathered through a pinned staging buffer)."""
        dst = self._check_blocks(op, pages, blocks)
        slots, foreign = self._sources(op, pages)
        try:
            return self._enqueue(op, slots, foreign, dst, state, req_id)
        except RestoreFenceError:
            raise
        except (RuntimeError, ValueError, TypeError) as exc:
            raise RestoreFenceError(f"{op}: the device refused the restore: {exc}") from exc

    def is_complete(self, ticket: object) -> bool:
        """True once the ticket's copy has completed on the device; never blocks."""
        if not isinstance(ticket, RestoreTicket):
            raise TypeError(f"not a restore ticket: {ticket!r}")
        if ticket.done:
            return True
        if not ticket.event.query():
            return False
        ticket.done = True
        self.in_flight -= 1
        if ticket.state is not None:
            # published only now, so nothing reads a state that is still being copied
            self.kv._states[ticket.req_id] = ticket.state
            ticket.state = None
        ticket.keep.clear()
        return True

    # -- housekeeping -----------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for every restore enqueued so far (teardown and benchmarks only; the
        worker never calls this)."""
        self.stream.synchronize()

    # -- the ways bytes move -------------------------------------------------------------

    def _gather_rows(self, out: torch.Tensor, src_idx: torch.Tensor, dst_idx: torch.Tensor) -> None:
        """``out[dst_idx[i]] = pool[src_idx[i]]`` read in place from the mapped pool."""
        if self.gather == "triton":
            _triton_gather(self._mapped, out, src_idx, dst_idx)
        else:
            out.index_copy_(0, dst_idx, torch.index_select(self._mapped, 0, src_idx))

    def _dma_rows(self, out: torch.Tensor, src_idx: torch.Tensor, dst_idx: torch.Tensor) -> None:
        keep = self._dma.copy(out, self.pool.buffer, dst_idx.cpu(), src_idx.cpu(), self.stream)
        self.stream.synchronize()  # probe only: ``keep`` must outlive the copy
        del keep

    def _pick_gather(self, gather: Gather) -> str | None:
        order = ["triton", "index"] if gather == "auto" else [gather]
        for name in order:
            if name == "triton" and _triton_gather is None:
                continue
            self.gather = name
            if self._probe(self._gather_rows):
                return name
        self.gather = None
        return None

    def _probe(self, move) -> bool:
        """Move two random rows of the pool with ``move`` into a scratch buffer and
        compare bytes. Restores the pool rows it borrowed; synchronous (construction)."""
        host = self.pool.rows(self.word)
        probe = [0, self.pool.num_slots - 1]
        saved = host[probe].clone()
        try:
            host[probe] = _random_rows(len(probe), host.shape[1], self.word)
            scratch = torch.zeros((2, host.shape[1]), dtype=self.word, device=self.device)
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                src = torch.tensor(probe, dtype=torch.int64, device=self.device)
                move(scratch, src, torch.arange(2, device=self.device))
            self.stream.synchronize()
            return torch.equal(scratch.cpu().view(torch.uint8), host[probe].view(torch.uint8))
        except Exception:  # noqa: BLE001 - any failure means: not this way, on this device
            return False
        finally:
            host[probe] = saved

    # -- internals --------------------------------------------------------------------

    def _check_blocks(
        self, op: OperationId, pages: Sequence[Any], blocks: Sequence[int]
    ) -> torch.Tensor:
        if len(pages) != len(blocks):
            raise RestoreFenceError(f"{op}: {len(pages)} pages for {len(blocks)} blocks")
        dst = _int64(blocks)
        if dst.numel():
            # One counting pass checks range and repeats (every op costs host time on
            # the restore path); the slower exact message is built only on failure.
            try:
                counts = torch.bincount(dst)
            except RuntimeError:  # a negative block
                counts = None
            if counts is None or counts.numel() > self.kv.num_blocks:
                lo, hi = int(dst.min()), int(dst.max())
                raise RestoreFenceError(
                    f"{op}: block {lo if lo < 0 else hi} outside [0, {self.kv.num_blocks})"
                )
            if int(counts.max()) > 1:
                raise RestoreFenceError(f"{op}: a destination block is named twice")
        return dst

    def _sources(
        self, op: OperationId, pages: Sequence[Any]
    ) -> tuple[torch.Tensor | None, list[torch.Tensor] | None]:
        """``(slots, None)`` when every page is a live page of our pool; ``(None,
        rows)`` when some are host tensors (they go through a staging buffer)."""
        if not len(pages):
            return torch.empty(0, dtype=torch.int64), None
        if isinstance(pages, HostPageBatch) or all(isinstance(p, HostPage) for p in pages):
            batch = pages if isinstance(pages, HostPageBatch) else None
            if batch is None:
                if any(p.pool is not self.pool for p in pages):
                    raise RestoreFenceError(f"{op}: a page is from another pool")
                batch = self.pool.batch(pages)
            if batch.pool is not self.pool:
                raise RestoreFenceError(f"{op}: the pages are from another pool")
            if not batch.all_live():
                stale = batch.stale()
                i = int(stale[0])
                raise RestoreFenceError(
                    f"{op}: {stale.numel()} page(s) evicted before the restore "
                    f"(first: page {i}, slot {int(batch.slots[i])})"
                )
            return batch.slots, None
        rows: list[torch.Tensor] = []
        for i, page in enumerate(pages):
            if isinstance(page, HostPage):
                if not page.live:
                    raise RestoreFenceError(
                        f"{op}: page {i} (slot {page.slot}) was evicted before the restore"
                    )
                page = page.tensor
            if not isinstance(page, torch.Tensor):
                raise RestoreFenceError(f"{op}: page {i} is a {type(page).__name__}")
            nbytes = page.numel() * page.element_size()
            if nbytes != self.kv.row_bytes:
                raise RestoreFenceError(
                    f"{op}: page {i} is {nbytes} bytes, a block is {self.kv.row_bytes}"
                )
            rows.append(_as_row(page, self.word))
        return None, rows

    def _enqueue(
        self,
        op: OperationId,
        slots: torch.Tensor | None,
        foreign: list[torch.Tensor] | None,
        dst: torch.Tensor,
        state: Any | None,
        req_id: str,
    ) -> RestoreTicket:
        n = dst.numel()
        words = self._kv_rows.shape[1]
        host_state = _pinned(state) if state is not None else None
        dma = self._dma if foreign is None else None
        staging: torch.Tensor | None = None
        if foreign is not None:
            staging = torch.empty((n, words), dtype=self.word, pin_memory=True)
            torch.stack(foreign, out=staging)
        elif self.method == "staged":
            staging = torch.empty((n, words), dtype=self.word, pin_memory=True)
            torch.index_select(self.pool.rows(self.word), 0, slots, out=staging)
        idx_host = None
        if n and dma is None:
            # Both index lists travel as one pinned [2, n] tensor in one asynchronous
            # copy: a copy from pageable memory would wait for the busy side stream.
            idx_host = torch.empty((2, n), dtype=torch.int64, pin_memory=True)
            torch.stack((dst if slots is None else slots, dst), out=idx_host)

        if self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):
                return self._issue(op, slots, dst, dma, staging, idx_host, host_state, req_id)
        return self._issue(op, slots, dst, dma, staging, idx_host, host_state, req_id)

    def _issue(
        self,
        op: OperationId,
        slots: torch.Tensor | None,
        dst: torch.Tensor,
        dma: _BatchDma | None,
        staging: torch.Tensor | None,
        idx_host: torch.Tensor | None,
        host_state: torch.Tensor | None,
        req_id: str,
    ) -> RestoreTicket:
        """Queue the restore on the side stream, behind the current stream's work, and
        record its fence. The device is current; nothing here waits."""
        n = dst.numel()
        current = torch.cuda.current_stream()
        dev_state = None
        if host_state is not None:
            # Allocated on the consumer's stream (the forward reads it there); marked as
            # used by the copy stream so the allocator cannot hand it out before the copy.
            dev_state = torch.empty(host_state.shape, dtype=host_state.dtype, device=self.device)
            dev_state.record_stream(self.stream)
        keep: list[Any] = [idx_host, staging, host_state]
        # set_stream rather than the stream context manager: the same switch with a
        # fraction of its Python overhead, which is paid on every restore.
        torch.cuda.set_stream(self.stream)
        try:
            self.stream.wait_stream(current)
            if n and dma is not None:
                keep += dma.copy(self.kv.pages, self.pool.buffer, dst, slots, self.stream)
            elif n and staging is None:
                idx = idx_host.to(self.device, non_blocking=True)
                self._gather_rows(self._kv_rows, idx[0], idx[1])
            elif n:
                idx = idx_host.to(self.device, non_blocking=True)
                rows = staging.to(self.device, non_blocking=True)
                self._kv_rows.index_copy_(0, idx[1], rows)
            if dev_state is not None:
                dev_state.copy_(host_state, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        finally:
            torch.cuda.set_stream(current)
        self.in_flight += 1
        return RestoreTicket(
            op=op,
            req_id=req_id,
            num_blocks=n,
            nbytes=n * self.kv.row_bytes,
            event=event,
            state=dev_state,
            keep=keep,
        )


def _int64(seq: Sequence[int]) -> torch.Tensor:
    """A 1-d int64 CPU tensor of ``seq`` (a tensor, or a sequence of ints)."""
    if isinstance(seq, torch.Tensor):
        return seq.detach().to("cpu", torch.int64).reshape(-1)
    if not len(seq):
        return torch.empty(0, dtype=torch.int64)
    # array() converts in C; far cheaper per block than torch.tensor over a tuple
    return torch.frombuffer(array("q", seq), dtype=torch.int64)


def _pinned(t: Any) -> torch.Tensor:
    t = t.tensor if isinstance(t, HostPage) else torch.as_tensor(t)
    if t.device.type != "cpu" or t.is_pinned():
        return t
    return t.pin_memory()


def _as_row(page: torch.Tensor, word: torch.dtype) -> torch.Tensor:
    return page.detach().reshape(-1).contiguous().view(torch.uint8).view(word)


def _random_rows(n: int, words: int, word: torch.dtype) -> torch.Tensor:
    nbytes = n * words * _itemsize(word)
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    return raw.view(word).view(n, words)


# -- batched DMA: cudaMemcpyBatchAsync (CUDA runtime >= 12.8) ----------------------------


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", _MemLocation),
        ("dstLocHint", _MemLocation),
        ("flags", ctypes.c_uint),
    ]


_SRC_ACCESS_ORDER_STREAM = 1  # cudaMemcpySrcAccessOrderStream: read in stream order


class _BatchDma:
    """Every block's copy queued on the device's copy engines by ONE runtime call,
    ``cudaMemcpyBatchAsync``, through the CUDA runtime torch itself loaded. CUDA only
    (HIP has no batched copy here: there the mapped gather is the fast path)."""

    _loaded: _BatchDma | None | bool = False

    def __init__(self, fn: Any, version: int):
        self.fn = fn
        self.version = version
        self.attrs = _MemcpyAttributes(_SRC_ACCESS_ORDER_STREAM, _MemLocation(), _MemLocation(), 0)
        self.attr_idx = (ctypes.c_size_t * 1)(0)

    @classmethod
    def load(cls) -> _BatchDma | None:
        """The runtime's batched copy, or None (HIP, an older runtime, no library)."""
        if cls._loaded is False:
            cls._loaded = cls._load()
        return cls._loaded or None

    @classmethod
    def _load(cls) -> _BatchDma | None:
        if device_backend() != "cuda" or sys.platform != "linux":
            return None
        lib = _loaded_cudart()
        if lib is None or not hasattr(lib, "cudaMemcpyBatchAsync"):
            return None
        version = ctypes.c_int(0)
        if lib.cudaRuntimeGetVersion(ctypes.byref(version)) != 0 or version.value < 12080:
            return None
        fn = lib.cudaMemcpyBatchAsync
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        # CUDA 12.8/12.9 take a failIdx pointer before the stream; CUDA 13 dropped it.
        fail = [vp] if version.value < 13000 else []
        fn.argtypes = [vp, vp, vp, sz, vp, vp, sz, *fail, vp]
        fn.restype = ctypes.c_int
        return cls(fn, version.value)

    def copy(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        dst_idx: torch.Tensor,
        src_idx: torch.Tensor,
        stream: Any,
    ) -> list[Any]:
        """Queue ``dst[dst_idx[i]] = src[src_idx[i]]`` (rows of equal bytes) on
        ``stream``; returns what must stay alive until the stream passes the copy."""
        row_bytes = dst[0].numel() * dst.element_size()
        n = dst_idx.numel()
        dsts = dst_idx * row_bytes + dst.data_ptr()
        srcs = src_idx * row_bytes + src.data_ptr()
        sizes = torch.full((n,), row_bytes, dtype=torch.int64)
        args: list[Any] = [
            dsts.data_ptr(),
            srcs.data_ptr(),
            sizes.data_ptr(),
            n,
            ctypes.addressof(self.attrs),
            ctypes.addressof(self.attr_idx),
            1,
        ]
        fail = None
        if self.version < 13000:
            fail = ctypes.c_size_t(0)
            args.append(ctypes.addressof(fail))
        args.append(stream.cuda_stream)
        rc = self.fn(*args)
        if rc != 0:
            raise RuntimeError(f"cudaMemcpyBatchAsync failed with cudaError {rc}")
        return [dsts, srcs, sizes, fail]


def _loaded_cudart() -> Any | None:
    """The CUDA runtime library torch has loaded (never a second copy of it)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


# -- the gather kernel: Triton where it is installed (CUDA and ROCm) ---------------------

try:  # an optional dependency: without it the gather is index_select + index_copy_
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - a missing or broken triton only loses this path
    triton = None

if triton is not None:

    @triton.jit
    def _gather_kernel(src, dst, src_idx, dst_idx, words, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        s = tl.load(src_idx + row).to(tl.int64)
        d = tl.load(dst_idx + row).to(tl.int64)
        mask = col < words
        tl.store(dst + d * words + col, tl.load(src + s * words + col, mask=mask), mask=mask)

    def _triton_gather(
        src: torch.Tensor, dst: torch.Tensor, src_idx: torch.Tensor, dst_idx: torch.Tensor
    ) -> None:
        """One kernel: ``dst[dst_idx[i]] = src[src_idx[i]]``, every row at once, reading
        ``src`` (the mapped pool) across the bus and writing the pages directly."""
        words = dst.shape[1]
        block = min(2048, triton.next_power_of_2(words))
        grid = (dst_idx.numel(), triton.cdiv(words, block))
        _gather_kernel[grid](src, dst, src_idx, dst_idx, words, BLOCK=block)

else:
    _triton_gather = None
