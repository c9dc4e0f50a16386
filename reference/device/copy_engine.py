"""The copy engine: restores scattered blocks from a ``PinnedHostPool`` into
``DeviceKvPages`` as one batched operation.

The engine never blocks: it enqueues on its own side stream, records an event as the
fence, and reports completion only through ``event.query()``.

How a restore moves its bytes (``TorchCopyEngine.method`` and ``gather``, fixed per
engine because it depends on the page size; every way is batched, never a Python loop
per block):

- ``dma``: ``cudaMemcpyBatchAsync`` queues every block's copy on the copy engines (CUDA
  runtime 12.8 and up), in calls of doubling size (8, 16, 32, ... copies) so the engines
  start while the host still queues; runs of consecutive slots into consecutive blocks
  go as one copy. Usually best for large pages.
- ``mapped``: the pinned pool is viewed as device memory (unified addressing: pinned host
  memory is readable by the device at its host address), and ONE gather kernel reads each
  source block across the bus and writes it into its destination page: a Triton kernel
  where Triton is installed (``mapped:triton``), else ``index_select`` into a device
  buffer plus a device-local ``index_copy_`` (``mapped:index``). ``mapped:prefetch``
  splits the Triton gather in two: the pool rows start moving into an engine-owned
  device stage as soon as the sources are known, while the host still reads and checks
  the blocks, and a device-local scatter puts them into their pages once the checks
  pass (hides the host time of many small blocks). The fast paths on HIP too.
- ``split``: both at once where both work: the copy engines move a share of the blocks
  (``dma``) while the Triton gather moves the rest on a second stream, and the restore's
  fence waits for both. For hosts where neither alone reaches the link (the SMs' reads
  of host memory capped well under it, DMA of small blocks bound by queueing each copy);
  ``auto`` measures it at a few shares and takes the best only where it is faster than
  the best single path.
- ``staged``: where the device cannot map the pool. The host gathers the blocks into a
  pinned staging buffer, one host-to-device DMA moves it, and one ``index_copy_``
  scatters it. Slower (a host memcpy first), still one transfer. Host tensors that are
  not pool pages always go this way.

Each path is probed once at construction (bytes compared), so a device or runtime that
cannot do it falls back instead of failing a restore. ``method="auto"`` then takes the
fastest of the paths that work, measured on this device (``kvfault.reference.device.calibration``:
once per device, driver, torch and page size, cached in the user's cache directory).

The host side of ``enqueue`` works on a reused pinned index buffer with numpy (see
``TorchCopyEngine``): a restore's wall clock is its host time before the first byte
moves plus the transfer, so that time is kept to a few vectorised operations.

The launch helpers (batched DMA, the Triton gather, stream ordering) live in
``kvfault.reference.device.launch``; a restore's ticket and its pinned index buffer in
``kvfault.reference.device.ticket``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from itertools import repeat
from typing import Any, Callable, Literal

import numpy as np
import torch

from kvfault.reference.device.calibration import (
    SPLIT,
    SPLIT_PARTS,
    SPLIT_SHARES,
    Calibrator,
    Choice,
    device_key,
    split_path,
    split_share,
)
from kvfault.reference.device.calibration import (
    calibrate as calibrate_paths,
)
from kvfault.reference.device.device_pages import (
    DeviceKvPages,
    device_backend,
    device_pci_bus,
    driver_version,
)
from kvfault.reference.device.host_pool import HostPage, HostPageBatch, PinnedHostPool, map_pinned
from kvfault.reference.device.launch import (
    _BatchDma,
    _Fork,
    _StreamOrder,
    _triton_gather,
    _TritonGather,
)
from kvfault.reference.device.ticket import RestoreTicket, _IndexBuffer
from kvfault.reference.errors import RestoreFenceError
from kvfault.reference.types import OperationId

Method = Literal["auto", "dma", "mapped", "staged", "split"]
# a way to move pool rows: (once the sources are known, or None; once the blocks are)
_Path = tuple[
    "Callable[[_IndexBuffer, int], None] | None",
    "Callable[[torch.Tensor, _IndexBuffer, int], None]",
]
# "auto": the CUDA runtime torch loaded, where there is one (batched DMA, raw stream
# ordering); "torch": only what torch offers on every backend, the path a ROCm build takes.
Runtime = Literal["auto", "torch"]
Gather = Literal["auto", "triton", "prefetch", "index"]

# From this page size up, "auto" restores by batched DMA where the runtime has it: on an
# H200 (PCIe 5) chunked batched DMA moved 97-99% of a contiguous copy end to end at 256 KiB
# and 2 MiB pages (the gather kernel 91-94%) but 74% at 32 KiB (host time in the batch
# call, ~1.2 us a copy or more), where the gather kernel moved 89-90% (docs/gpu_tier.md).
DMA_MIN_BLOCK_BYTES = 256 * 1024

# One calibration restore (per path, per round), where the pool holds that much: large
# restores are where the paths differ most in bandwidth (on an H100, 16 MiB restores of
# 256 KiB pages timed DMA and the gather within 3%, while at 128 MiB DMA moved 98% of a
# contiguous copy and the gather 92%), and every path still takes milliseconds.
CALIBRATION_BYTES = 64 * 1024 * 1024
# The most copies one cudaMemcpyBatchAsync call queues (the calls double up to it): on
# lent H100s queueing took ~0.5 us a copy, and the wall clock behaved as if a call's
# copies start only once it returns: the last of calls that doubled without bound held
# half of a restore back from the engines. 128 MiB in 32 KiB pages by DMA, one host: 76% of a contiguous
# copy end to end uncapped, 88% at 128 copies a call, 86% at 512, 71% at 2048; 16 MiB:
# 67%, 74%, 67%, 66% (benchmarks/results/gpu_hosts/h100-10.probe_split.txt).
DMA_CHUNK_MAX = 128
CALIBRATION_WARMUP = 2  # untimed restores per path first (module loads, first touch)
# The small calibration restores are this share of the large ones: where another path
# wins them (on an H100, DMA's host time per batch call weighs more in 16 MiB restores
# than in 128 MiB ones), restores below the crossover take that path.
CALIBRATION_SMALL_SHARE = 8
CALIBRATION_TIMEOUT_S = 5.0


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


class TorchCopyEngine:
    """Restores tier pages into ``DeviceKvPages`` on a side stream; implements
    ``kvfault.reference.interfaces.CopyEngine``.

    ``enqueue`` only enqueues (it never waits on the device) and raises
    ``RestoreFenceError`` when the restore cannot be fenced: pages and blocks disagree, a
    block is out of range or repeated, a page is stale (evicted) or of the wrong size, or
    the device refused the work. ``is_complete`` polls the ticket's event and never blocks.
    A restore is ordered after the work already queued on the stream that is current at
    enqueue (the forward may still read pages being replaced).

    ``method`` (resolved once, at construction, for this page size; see the module
    docstring): ``"auto"`` prepares every path that works here and takes the fastest by
    measurement (``calibrate``: a ``Calibrator``; True, the default: cached in the user's
    cache directory; False: the old rule, ``dma`` from ``dma_min_block_bytes`` up, else
    the gather), else ``staged``. ``choice`` says what was taken and why. Naming a
    method (and ``gather``) forces it; one the device cannot do raises ``RuntimeError``
    here, never at a restore.
    ``runtime="torch"`` uses nothing but torch (no CUDA runtime call through ctypes, so
    no batched DMA): what a ROCm build does anyway, and how a CUDA machine checks that
    path. Construction probes the chosen path once (and compiles its kernel), synchronously.

    The host side of ``enqueue`` is a handful of numpy operations on a reused pinned
    index buffer (no torch operator, no Python loop per block for a ``HostPageBatch``):
    ``blocks`` are written into it by one ``struct.pack_into``, range and repeats are
    checked vectorised, and the gather kernel is launched through Triton's compiled
    launcher directly, reading its indices from the pinned buffer.
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
        dma_chunk: int = 8,
        dma_chunk_max: int = DMA_CHUNK_MAX,
        runtime: Runtime = "auto",
        calibrate: bool | Calibrator = True,
        split: float | None = None,
    ):
        if runtime not in ("auto", "torch"):
            raise ValueError(f"runtime is 'auto' or 'torch', got {runtime!r}")
        self.kv = kv
        self.pool = pool
        self.device = kv.device
        self.stream = stream if stream is not None else torch.cuda.Stream(device=self.device)
        self.word = word_dtype(kv.row_bytes, widest_word)
        self._kv_rows = kv.rows(self.word)
        self._dma: _BatchDma | None = None
        self._mapped: torch.Tensor | None = None
        self._tg: _TritonGather | None = None
        # mapped:prefetch: the pool rows gathered into the stage before the blocks are
        # read, then scattered from it into the pages
        self._tg_pre: _TritonGather | None = None
        self._tg_scatter: _TritonGather | None = None
        self._stage: torch.Tensor | None = None
        self._early: Callable[[_IndexBuffer, int], None] | None = None
        # auto, where large restores are faster by another path: that path, from
        # _large_from blocks up
        self._large: _Path | None = None
        self._large_from: int | None = None
        # split: the share of a restore's blocks the copy engines move (the rest by the
        # gather on the second stream, forked from and joined back into ``stream``)
        self._split_share: float | None = None
        self._fork: _Fork | None = None
        self.gather: str | None = None  # "triton" or "index" when method is "mapped"
        # dma: copies in the first cudaMemcpyBatchAsync call, doubling with each next
        # one up to dma_chunk_max, so the copy engines start while the host still
        # queues and never wait long for the last call (0: one call)
        self.dma_chunk = dma_chunk
        self.dma_chunk_max = dma_chunk_max
        self._bufs: list[_IndexBuffer] = []
        self._owner = np.empty(kv.num_blocks, dtype=np.int64)  # repeats, many blocks
        self._arange = np.arange(0, dtype=np.int64)
        self.runtime = runtime
        self._after_current = _StreamOrder(self.device, self.stream, runtime)
        self._stream_handle = self.stream.cuda_stream
        self._move: Callable[[torch.Tensor, _IndexBuffer, int], None] = self._no_move
        if pool is not None and pool.row_bytes != kv.row_bytes:
            raise ValueError(f"pool pages are {pool.row_bytes} bytes, device pages {kv.row_bytes}")
        if method not in ("auto", "dma", "mapped", "staged", "split"):
            raise ValueError(
                f"method is 'auto', 'dma', 'mapped', 'split' or 'staged', got {method!r}"
            )
        if split is not None and not (method == "split" and 0.0 <= split <= 1.0):
            raise ValueError(f"split is a share in [0, 1] with method='split', got {split!r}")
        self.choice = self._choose(method, gather, dma_min_block_bytes, calibrate, split)
        self.method: str = self.choice.path.partition(":")[0]
        self.in_flight = 0  # tickets enqueued and not yet observed complete

    # -- choosing the path ---------------------------------------------------------------

    def _choose(
        self,
        method: Method,
        gather: Gather,
        dma_min: int,
        calibrate: bool | Calibrator,
        split: float | None = None,
    ) -> Choice:
        """Prepare (and probe) every path ``method`` allows, then take the one named, the
        only one, or (``auto``) the fastest by measurement. Sets ``_move`` for it."""
        moves = self._prepare(method, gather) if self.pool is not None else {}
        forced = method != "auto"
        if method == "split" and self._fork is None:
            moves = {}  # both parts are needed
        if not moves:
            if method not in ("auto", "staged"):
                raise RuntimeError(
                    f"restore method {method!r} is not available on this device "
                    f"({device_backend()}, torch {torch.__version__}, runtime "
                    f"{self.runtime!r}); use method='auto'"
                )
            why = "no pool" if self.pool is None else "the pool cannot be read in place"
            return Choice("staged", "forced" if forced else "only", why)
        candidates = [*moves, SPLIT] if self._fork is not None else list(moves)
        if method == "split":
            choice = self._forced_split(moves, split)
        elif forced:
            path = next(iter(moves))
            choice = Choice(path, "forced", f"method={method!r}")
        elif len(moves) == 1:
            path = next(iter(moves))
            choice = Choice(path, "only", "the only path this device and runtime can take")
        elif calibrate is False:
            path = (
                "dma"
                if "dma" in moves and self.kv.row_bytes >= dma_min
                else next(p for p in moves if p != "dma")
            )
            choice = Choice(path, "rule", f"pages of {self.kv.row_bytes} B vs dma from {dma_min} B")
        else:
            calibrator = calibrate if isinstance(calibrate, Calibrator) else Calibrator.default()
            choice = calibrator.choose(
                self._device_key(),
                self.kv.row_bytes,
                candidates,
                lambda: self._measurer(moves),
            )
        self._early, self._move = self._resolve(moves, choice.path)
        self._large = self._resolve(moves, choice.large) if choice.large is not None else None
        self._large_from = choice.large_from if self._large is not None else None
        taken = {choice.path, choice.large or choice.path}
        shares = [x for x in map(split_share, taken) if x is not None]
        self._split_share = shares[0] if shares else None
        if shares:
            taken |= set(SPLIT_PARTS)
        else:
            self._fork = None
        if "mapped:prefetch" not in taken:
            self._stage = None  # probed or calibrated only: not kept
        if "dma" not in taken:
            self._dma = None
        if choice.path.startswith("mapped"):
            self.gather = choice.path.partition(":")[2]
        elif split_share(choice.path) is not None:
            self.gather = "triton"
        else:
            self.gather = None
        return choice

    def _resolve(self, moves: dict[str, _Path], path: str) -> _Path:
        """The (early, move) pair of ``path``; for ``split:SHARE`` the split move, its
        share set on the engine (one share per engine: a choice holds one split)."""
        share = split_share(path)
        if share is None:
            return moves[path]
        self._split_share = share
        return (None, self._move_split)

    def _forced_split(self, moves: dict[str, _Path], share: float | None) -> Choice:
        """``method="split"``: at ``share``, or at the fastest of ``SPLIT_SHARES`` timed
        here (three restores each of the calibration size)."""
        if share is not None:
            return Choice(split_path(share), "forced", f"method='split', split={share}")
        measure, _small, large, what = self._measurer(moves)
        shares = [split_path(x) for x in SPLIT_SHARES]
        best = calibrate_paths(shares, lambda p: measure(p, large), rounds=3, what=what)
        return Choice(best.path, "forced", f"method='split', {best.reason}", best.seconds)

    def path_for(self, blocks: int) -> str:
        """The path a restore of ``blocks`` blocks takes (``choice.path_for``)."""
        return self.choice.path_for(blocks)

    def _prepare(self, method: Method, gather: Gather) -> dict[str, _Path]:
        """Every path ``method`` allows that works here (probed), in the order a tie
        goes: ``dma``, ``mapped:triton``, ``mapped:prefetch``, ``mapped:index``. Each is
        (what runs once the sources are known, or None; what runs once the blocks are)."""
        moves: dict[str, _Path] = {}
        if method in ("auto", "dma", "split") and self.runtime == "auto":
            self._dma = _BatchDma.load()
            if self._dma is not None and self._probe(None, self._move_dma):
                moves["dma"] = (None, self._move_dma)
            else:
                self._dma = None
        if method in ("auto", "mapped", "split"):
            assert self.pool is not None  # _prepare runs only with a pool
            if method == "split":
                gather = "triton"
            self._mapped = self.pool.mapped_rows(self.word, self.device)
            if self._mapped is not None:
                self._mapped_ptr = self._mapped.data_ptr()
                picked = self._pick_gather(gather) if gather != "prefetch" else None
                if picked is not None:
                    moves[f"mapped:{picked}"] = (None, self._move)
                if gather == "prefetch" or (gather == "auto" and method == "auto"):
                    if self._prepare_prefetch():
                        moves["mapped:prefetch"] = (self._prefetch, self._scatter)
                if picked == "index" and "mapped:prefetch" in moves:
                    moves["mapped:index"] = moves.pop("mapped:index")  # last in a tie
                if not any(p.startswith("mapped") for p in moves):
                    self._mapped = None
        if all(p in moves for p in SPLIT_PARTS) and self._tg is not None:
            self._fork = _Fork.make(self.device, self.stream)
            if self._fork is not None and not self._probe(None, self._move_split):
                self._fork = None
        return moves

    def _prepare_prefetch(self) -> bool:
        """Compile the two halves of ``mapped:prefetch`` (Triton's direct launcher only)
        and probe them."""
        mapped = self._mapped
        if mapped is None or _triton_gather is None:
            return False
        buf = self._buffer(1)
        self._tg_pre = _TritonGather.compile(mapped, self._kv_rows, buf, dst_idx=False)
        self._tg_scatter = _TritonGather.compile(self._kv_rows, self._kv_rows, buf, src_idx=False)
        if self._tg_pre is None or self._tg_scatter is None:
            return False
        return self._probe(self._prefetch, self._scatter)

    def _device_key(self) -> str:
        try:
            import triton

            triton_version = triton.__version__
        except Exception:  # noqa: BLE001 - no Triton: the key says so
            triton_version = "none"
        return device_key(
            torch.cuda.get_device_name(self.device),
            device_pci_bus(self.device),
            driver_version(),
            torch.__version__,
            f"{triton_version}, runtime {self.runtime}",
        )

    def _measurer(
        self, moves: dict[str, _Path]
    ) -> tuple[Callable[[str, int], float], int, int, str]:
        """A timer of one calibration restore by a path of ``CALIBRATION_BYTES`` (at most
        the pool and the device pages; and of an eighth of that, the small restores) of
        random pool slots into a scratch buffer,
        wall clock from the call to the fence seen complete, with the blocks given as a
        tuple of ints and checked as ``enqueue`` does (a path that hides that host time
        gets the credit). Each path runs once first (module loads, first-touch)."""
        pool = self.pool
        assert pool is not None
        rb = self.kv.row_bytes
        n = max(1, min(CALIBRATION_BYTES // rb, pool.num_slots, self.kv.num_blocks))
        rng = np.random.default_rng(n)
        buf = _IndexBuffer(max(256, n))
        buf.np[0, :n] = rng.choice(pool.num_slots, size=n, replace=False)
        small = max(1, n // CALIBRATION_SMALL_SHARE)
        blocks = {k: tuple(rng.permutation(k).tolist()) for k in {n, small}}
        op = OperationId("calibration", 0)
        with torch.cuda.device(self.device):
            scratch = torch.empty((n, self._kv_rows.shape[1]), dtype=self.word, device=self.device)
            event = torch.cuda.Event()

        def measure(path: str, k: int) -> float:
            with torch.cuda.device(self.device):
                torch.cuda.synchronize(self.device)
                deadline = time.monotonic() + CALIBRATION_TIMEOUT_S
                early, late = self._resolve(moves, path)
                t0 = time.perf_counter()
                if early is not None:
                    early(buf, k)
                self._put_blocks(op, buf, blocks[k], k)
                late(scratch, buf, k)
                event.record(self.stream)
                while not event.query():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{path} took over {CALIBRATION_TIMEOUT_S} s")
                return time.perf_counter() - t0

        warm = [*moves, split_path(0.5)] if self._fork is not None else list(moves)
        for _ in range(CALIBRATION_WARMUP):
            for path in warm:
                measure(path, n)
        return measure, small, n, f"{rb} B pages"

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
        (gathered through a pinned staging buffer). ``blocks`` is a sequence of ints, or
        a 1-d integer tensor or array. Every check runs before anything is queued."""
        n = len(blocks)
        if len(pages) != n:
            raise RestoreFenceError(f"{op}: {len(pages)} pages for {n} blocks")
        buf = self._buffer(n)
        foreign = self._put_sources(op, buf, pages, n)
        early, move = self._early, self._move
        if self._large_from is not None and n >= self._large_from:
            early, move = self._large  # type: ignore[misc]  # set with _large_from
        if foreign is not None or not n:
            early = None
        try:
            if early is not None:
                # the pool rows start moving into the engine's own stage while the
                # blocks are read and checked: nothing reaches the pages before that
                self._on_device(early, buf, n)
            self._put_blocks(op, buf, blocks, n)
            return self._issue(op, buf, n, foreign, state, req_id, move)
        except BaseException as exc:
            if early is not None:
                self.stream.synchronize()  # the stage only: wait, so nothing stays in flight
            if isinstance(exc, (RuntimeError, ValueError, TypeError)) and not isinstance(
                exc, RestoreFenceError
            ):
                raise RestoreFenceError(f"{op}: the device refused the restore: {exc}") from exc
            raise

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
        buf = ticket.index
        if buf is not None and buf.event is ticket.event:
            buf.event = None  # free for the next restore
        ticket.index = None
        ticket.keep.clear()
        return True

    # -- housekeeping -----------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for every restore enqueued so far (teardown and benchmarks only; the
        worker never calls this)."""
        self.stream.synchronize()

    # -- checks: numpy on the pinned index buffer, before anything is queued -------------

    def _buffer(self, n: int) -> _IndexBuffer:
        """A free index buffer of at least ``n`` columns (smallest first); a new one
        when every fitting buffer is still read by a restore in flight."""
        for buf in self._bufs:
            if buf.cap >= n and buf.is_free():
                return buf
        buf = _IndexBuffer(max(256, 1 << max(0, n - 1).bit_length()))
        if len(self._bufs) >= 8:  # keep a few: drop the free ones
            self._bufs = [b for b in self._bufs if not b.is_free()]
        self._bufs.append(buf)
        self._bufs.sort(key=lambda b: b.cap)
        if self._arange.size < buf.cap:
            self._arange = np.arange(buf.cap, dtype=np.int64)
        return buf

    def _put_blocks(self, op: OperationId, buf: _IndexBuffer, blocks: Any, n: int) -> None:
        """Row 1 := ``blocks``; raises unless each is in range and named once."""
        if not n:
            return
        row = buf.np[1, :n]
        if isinstance(blocks, (torch.Tensor, np.ndarray)):
            arr = blocks.detach().cpu().numpy() if isinstance(blocks, torch.Tensor) else blocks
            if arr.dtype.kind not in "iu" or arr.size != n:
                raise RestoreFenceError(f"{op}: blocks must be {n} integers, got {arr.dtype}")
            row[:] = arr.reshape(-1)
        else:
            try:  # one C call converts every int straight into the pinned row
                struct.pack_into(f"{n}q", buf.np, buf.cap * 8, *blocks)
            except struct.error as exc:
                raise RestoreFenceError(f"{op}: blocks must be int64 values: {exc}") from None
        nb = self.kv.num_blocks
        if nb <= 64 * n:  # one count checks range (a negative raises) and repeats
            try:
                counts = np.bincount(row, minlength=nb)
            except ValueError:
                counts = None
            if counts is not None and counts.size == nb:
                if counts.max() > 1:
                    raise RestoreFenceError(f"{op}: a destination block is named twice")
                return
        # one unsigned max checks both ends: a negative block reads as a huge one
        elif int(row.view(np.uint64).max()) < nb:
            if not _distinct(row, n, self._owner, self._arange):
                raise RestoreFenceError(f"{op}: a destination block is named twice")
            return
        lo, hi = int(row.min()), int(row.max())
        raise RestoreFenceError(f"{op}: block {lo if lo < 0 else hi} outside [0, {nb})")

    def _put_sources(
        self, op: OperationId, buf: _IndexBuffer, pages: Any, n: int
    ) -> list[torch.Tensor] | None:
        """Row 0 := the pool slots of ``pages`` and None, when every page is a live page
        of our pool; else the pages as host rows (they go through a staging buffer)."""
        pool = self.pool
        if isinstance(pages, HostPageBatch):
            if pages.pool is not pool:
                raise RestoreFenceError(f"{op}: the pages are from another pool")
            slots, gens = pages.slots_np, pages.generations_np  # in range: checked at birth
            buf.np[0, :n] = slots
            if pages.epoch is not None and pages.epoch == pool.frees:
                return None  # nothing freed since the batch was taken live
        elif not n:
            return None
        elif all(map(isinstance, pages, repeat(HostPage))):
            if pool is None or {p.pool for p in pages} != {pool}:
                raise RestoreFenceError(f"{op}: a page is from another pool")
            struct.pack_into(f"{n}q", buf.np, 0, *[p.slot for p in pages])
            struct.pack_into(f"{n}q", buf.np, 2 * buf.cap * 8, *[p.generation for p in pages])
            slots, gens = buf.np[0, :n], buf.np[2, :n]
            if int(slots.view(np.uint64).max()) >= pool.num_slots:
                raise RestoreFenceError(f"{op}: a page names a slot outside the pool")
        else:
            return self._foreign_rows(op, pages)
        if n and not (pool.generations_np.take(slots) == gens).all():
            stale = np.flatnonzero(pool.generations_np.take(slots) != gens)
            i = int(stale[0])
            raise RestoreFenceError(
                f"{op}: {stale.size} page(s) evicted before the restore "
                f"(first: page {i}, slot {int(slots[i])})"
            )
        return None

    def _foreign_rows(self, op: OperationId, pages: Sequence[Any]) -> list[torch.Tensor]:
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
        return rows

    # -- issuing -------------------------------------------------------------------------

    def _issue(
        self,
        op: OperationId,
        buf: _IndexBuffer,
        n: int,
        foreign: list[torch.Tensor] | None,
        state: Any | None,
        req_id: str,
        move: Callable[[torch.Tensor, _IndexBuffer, int], None],
    ) -> RestoreTicket:
        host_state = _pinned(state) if state is not None else None
        staging: torch.Tensor | None = None
        if foreign is not None:
            staging = torch.empty((n, self._kv_rows.shape[1]), dtype=self.word, pin_memory=True)
            torch.stack(foreign, out=staging)
        elif n and self.method == "staged":
            pool = self.pool
            assert pool is not None  # pool pages come only with a pool (_put_sources)
            staging = torch.empty((n, self._kv_rows.shape[1]), dtype=self.word, pin_memory=True)
            torch.index_select(pool.rows(self.word), 0, buf.host[0, :n], out=staging)
        if self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):
                return self._queue(op, buf, n, staging, host_state, req_id, move)
        return self._queue(op, buf, n, staging, host_state, req_id, move)

    def _queue(
        self,
        op: OperationId,
        buf: _IndexBuffer,
        n: int,
        staging: torch.Tensor | None,
        host_state: torch.Tensor | None,
        req_id: str,
        move: Callable[[torch.Tensor, _IndexBuffer, int], None],
    ) -> RestoreTicket:
        """Queue the restore on the side stream, behind the current stream's work, and
        record its fence. The device is current; nothing here waits."""
        dev_state = None
        if host_state is not None:
            # Allocated on the consumer's stream (the forward reads it there); marked as
            # used by the copy stream so the allocator cannot hand it out before the copy.
            dev_state = torch.empty(host_state.shape, dtype=host_state.dtype, device=self.device)
            dev_state.record_stream(self.stream)
        self._after_current()
        if n and staging is not None:
            self._on_side_stream(self._scatter_staged, staging, buf, n)
        elif n:
            move(self._kv_rows, buf, n)
        if dev_state is not None:
            self._on_side_stream(dev_state.copy_, host_state, non_blocking=True)
        event = torch.cuda.Event()
        event.record(self.stream)
        buf.event = event
        self.in_flight += 1
        return RestoreTicket(
            op=op,
            req_id=req_id,
            num_blocks=n,
            nbytes=n * self.kv.row_bytes,
            event=event,
            state=dev_state,
            keep=[staging, host_state],
            index=buf,
        )

    def _on_device(self, fn: Any, *args: Any) -> None:
        if self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):
                fn(*args)
        else:
            fn(*args)

    def _on_side_stream(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        # set_stream rather than the stream context manager: the same switch with a
        # fraction of its Python overhead
        current = torch.cuda.current_stream(self.device)
        torch.cuda.set_stream(self.stream)
        try:
            fn(*args, **kwargs)
        finally:
            torch.cuda.set_stream(current)

    # -- the ways bytes move: out[row n] = pool[slot], indices in rows 0 and 1 of buf --------

    def _no_move(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        raise RuntimeError("no way to move pool pages on this engine")

    def _move_dma(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """Batched DMA; runs where both slots and blocks are consecutive go as one copy.
        Rows 2-4 of ``buf`` take the source addresses, destination addresses, sizes."""
        pool, dma = self.pool, self._dma
        assert pool is not None and dma is not None  # set before _move_dma is chosen
        a = buf.np
        idx = a[:2, :n]  # source slots, destination blocks
        rb = self.kv.row_bytes
        starts = None
        if n > 1:
            adjacent = (np.diff(idx, axis=1) == 1).all(axis=0)
            if adjacent.any():
                starts = np.flatnonzero(np.concatenate(([True], ~adjacent)))
        if starts is None:
            count = n
            addr = a[2:4, :n]
            np.multiply(idx, rb, out=addr)
            a[4, :n] = rb
        else:
            count = starts.size
            addr = a[2:4, :count]
            np.multiply(idx[:, starts], rb, out=addr)
            np.subtract(np.append(starts[1:], n), starts, out=a[4, :count])
            a[4, :count] *= rb
        addr += np.array([[pool.buffer.data_ptr()], [out.data_ptr()]], dtype=np.int64)
        srcs, dsts, sizes = buf.row_ptr(2), buf.row_ptr(3), buf.row_ptr(4)
        first, step = 0, (self.dma_chunk if self.dma_chunk > 0 else count)
        while first < count:
            k = min(step, count - first)
            try:
                dma.copy(
                    dsts + 8 * first, srcs + 8 * first, sizes + 8 * first, k, self._stream_handle
                )
            except RuntimeError:
                if first:  # part of the restore is queued: let it land, then refuse
                    self.stream.synchronize()
                raise
            first += k
            step = min(step * 2, max(self.dma_chunk_max, self.dma_chunk))

    def _move_triton(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """One gather kernel through Triton's compiled launcher (no argument binding per
        call), indices read in place from the pinned buffer."""
        tg = self._tg
        assert tg is not None  # compiled before _move_triton is chosen (_pick_gather)
        tg(self._stream_handle, self._mapped_ptr, out.data_ptr(), buf.ptr, buf.row_ptr(1), n)

    def _move_split(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """``split``: the last ``n - k`` rows by the gather kernel on the second stream
        (launched first: it needs no host time), the first ``k`` (the engine's split
        share of ``n``) by batched DMA on the side stream meanwhile; the side stream then
        waits for the gather, so the restore's fence covers both."""
        fork, tg, share = self._fork, self._tg, self._split_share
        assert fork is not None and tg is not None and share is not None  # set with the path
        k = min(n, max(0, round(share * n)))
        if k == n or k == 0:
            (self._move_dma if k else self._move_triton)(out, buf, n)
            return
        fork.fork()
        tg(fork.other_handle, self._mapped_ptr, out.data_ptr(), buf.ptr + 8 * k,
           buf.row_ptr(1) + 8 * k, n - k)  # fmt: skip
        try:
            self._move_dma(out, buf, k)
        except BaseException:
            fork.join()
            self.stream.synchronize()  # the gather still reads ``buf``: let it finish
            raise
        fork.join()

    def _prefetch(self, buf: _IndexBuffer, n: int) -> None:
        """``mapped:prefetch``, first half: pool rows (row 0 of ``buf``) into the first
        ``n`` rows of the stage, across the bus. Needs no block."""
        tg = self._tg_pre
        assert tg is not None  # compiled before the path is chosen (_prepare_prefetch)
        stage = self._stage
        if stage is None or stage.shape[0] < n:
            # allocated on the side stream: the caching allocator hands a freed stage
            # out again only in that stream's order, after every copy that read it
            with torch.cuda.stream(self.stream):
                self._stage = stage = torch.empty(
                    (1 << max(0, n - 1).bit_length(), self._kv_rows.shape[1]),
                    dtype=self.word,
                    device=self.device,
                )
        tg(self._stream_handle, self._mapped_ptr, stage.data_ptr(), buf.ptr, buf.ptr, n)

    def _scatter(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """``mapped:prefetch``, second half: stage row i into block ``buf[1, i]``
        (device memory to device memory)."""
        tg, stage = self._tg_scatter, self._stage
        assert tg is not None and stage is not None  # _prefetch ran first
        tg(self._stream_handle, stage.data_ptr(), out.data_ptr(), buf.ptr, buf.row_ptr(1), n)

    def _move_triton_jit(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """The same kernel through ``kernel[grid](...)`` (where the direct launch is not
        available in this Triton)."""
        idx = self._mapped_index(buf)
        self._on_side_stream(
            _triton_gather,
            self._mapped,
            out,
            idx[0, :n],
            idx[1, :n],
        )

    def _move_index(self, out: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """``index_select`` from the mapped pool into a device buffer, then a device-local
        ``index_copy_`` (no Triton)."""
        idx = self._mapped_index(buf)

        def gather() -> None:
            out.index_copy_(0, idx[1, :n], torch.index_select(self._mapped, 0, idx[0, :n]))

        self._on_side_stream(gather)

    def _mapped_index(self, buf: _IndexBuffer) -> torch.Tensor:
        if buf.mapped is None:
            buf.mapped = map_pinned(buf.host, self.device)
            if buf.mapped is None:
                raise RuntimeError("the index buffer cannot be mapped")
        return buf.mapped

    def _scatter_staged(self, staging: torch.Tensor, buf: _IndexBuffer, n: int) -> None:
        """Staged rows: one DMA of the rows and one of the block indices, one scatter."""
        idx = buf.host[1, :n].to(self.device, non_blocking=True)
        rows = staging.to(self.device, non_blocking=True)
        self._kv_rows.index_copy_(0, idx, rows)

    def _pick_gather(self, gather: Gather) -> str | None:
        order = ["triton", "index"] if gather == "auto" else [gather]
        for name in order:
            if name == "triton" and _triton_gather is None:
                continue
            self.gather = name
            if name == "triton":
                mapped = self._mapped
                assert mapped is not None  # a gather is picked only for mapped rows
                self._mapped_ptr = mapped.data_ptr()
                self._tg = _TritonGather.compile(mapped, self._kv_rows, self._buffer(1))
                if self._tg is not None and self._probe(None, self._move_triton):
                    self._move = self._move_triton
                    return name
                self._tg = None
                if self._probe(None, self._move_triton_jit):
                    self._move = self._move_triton_jit
                    return name
            elif self._probe(None, self._move_index):
                self._move = self._move_index
                return name
        self.gather = None
        return None

    def _probe(
        self,
        early: Callable[[_IndexBuffer, int], None] | None,
        move: Callable[[torch.Tensor, _IndexBuffer, int], None],
    ) -> bool:
        """Move two random rows of the pool with ``early`` (if any) then ``move`` into a
        scratch buffer and compare bytes. Restores the pool rows it borrowed;
        synchronous (construction)."""
        pool = self.pool
        assert pool is not None  # a way to move pool pages is probed only with a pool
        host = pool.rows(self.word)
        probe = [0, pool.num_slots - 1]
        saved = host[probe].clone()
        try:
            host[probe] = _random_rows(len(probe), host.shape[1], self.word)
            with torch.cuda.device(self.device):
                scratch = torch.zeros((2, host.shape[1]), dtype=self.word, device=self.device)
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
                buf = self._buffer(2)
                buf.np[0, :2] = probe
                buf.np[1, :2] = [0, 1]
                if early is not None:
                    early(buf, 2)
                if move == self._move_split:
                    self._split_share = 0.5  # one row each way
                move(scratch, buf, 2)
                self.stream.synchronize()
            return torch.equal(scratch.cpu().view(torch.uint8), host[probe].view(torch.uint8))
        except Exception:  # noqa: BLE001 - any failure means: not this way, on this device
            return False
        finally:
            host[probe] = saved


def _distinct(row: np.ndarray, n: int, owner: np.ndarray, arange: np.ndarray) -> bool:
    """No value of ``row`` (all in ``[0, owner.size)``) repeats, in O(n) however large
    ``owner`` is: position i claims ``owner[row[i]]``, a value named twice keeps one
    claim only."""
    ar = arange[:n]
    owner[row] = ar
    return bool((owner[row] == ar).all())


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
