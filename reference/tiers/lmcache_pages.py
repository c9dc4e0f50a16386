"""The LMCache tier's pages: the KV layout of the model it stores, how a simulator page
(a 64-bit fingerprint, or a tensor of one block) becomes bytes in a server slot and back,
and the recycled CPU buffers a retrieve copies into. Used by
``kvfault.reference.tiers.lmcache.LMCacheTier``; importing this module imports neither torch nor
lmcache (the tier hands its ``torch`` module in)."""

from __future__ import annotations

import weakref
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_HEADER_INT16 = 8  # 16 bytes of fingerprint in the first row of a block
_MIX = 0x9E3779B1  # odd multiplier of the filler pattern

PageFormat = Literal["fingerprint", "tensor"]


@dataclass(frozen=True)
class KVLayout:
    """Per-token KV shape of the model the tier stores: ``2 x layers x hidden``."""

    num_layers: int = 2
    num_heads: int = 2
    head_dim: int = 8
    dtype: str = "bfloat16"

    @property
    def hidden(self) -> int:
        return self.num_heads * self.head_dim

    def __post_init__(self) -> None:
        if self.num_layers <= 0 or self.num_heads <= 0 or self.head_dim <= 0:
            raise ValueError(f"layout sizes must be positive: {self}")
        if self.dtype not in ("bfloat16", "float16"):
            raise ValueError(f"dtype must be bfloat16 or float16, got {self.dtype!r}")
        if self.hidden < _HEADER_INT16:
            raise ValueError(f"hidden size {self.hidden} must be >= {_HEADER_INT16}")

    def chunk_bytes(self, chunk_size: int) -> int:
        return 2 * self.num_layers * chunk_size * self.hidden * 2


class _Recycler:
    """Chunk-sized CPU buffers whose memory is reused once nothing references it.

    ``take`` returns a tensor over a ``bytearray`` the recycler owns. Every tensor made
    from it (views, pages) keeps its storage, and the storage keeps a one-off
    ``memoryview``; when the last of them is gone the memoryview is collected and the
    ``bytearray`` goes back to the free list (at most ``keep`` of them; the rest are
    freed). So a buffer is never handed out twice while anything can still read it,
    and a steady stream of retrieves copies into memory that is already paged in
    instead of faulting fresh pages (3x slower than the copy itself on a 2-core box).
    """

    def __init__(self, torch: Any, shape: tuple[int, ...], dtype: Any, keep: int):
        self._torch = torch
        self._shape = shape
        self._dtype = dtype
        self._nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        self._keep = keep
        self._free: list[bytearray] = []  # append/pop are atomic: finalizers run anywhere

    def take(self) -> Any:
        slab = self._free.pop() if self._free else bytearray(self._nbytes)
        view = memoryview(slab)
        tensor = self._torch.frombuffer(view, dtype=self._dtype).view(self._shape)
        weakref.finalize(view, self._give_back, slab)
        return tensor

    def _give_back(self, slab: bytearray) -> None:
        if len(self._free) < self._keep:
            self._free.append(slab)


class CopyThreads:
    """Runs a copy of ``n`` blocks split into contiguous parts, one per thread: the
    caller's thread takes the first part, helper threads (started on first use) the
    others, and ``run`` returns when all are done, raising the first error. With
    ``threads`` 1 the caller copies everything. ``close`` stops the helpers."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    def run(self, copy: Callable[[int, int], Any], n: int) -> None:
        parts = min(self.threads, n)
        if parts < 2:
            copy(0, n)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="kvf-copy")
        cuts = [n * i // parts for i in range(parts + 1)]
        helpers = [self._pool.submit(copy, cuts[i], cuts[i + 1]) for i in range(1, parts)]
        try:
            copy(cuts[0], cuts[1])
        finally:
            wait(helpers)  # no copy outlives ``run``, even when the caller's part failed
        for f in helpers:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _PageCodec:
    """The page encoding and the slot copies of ``LMCacheTier`` (its base class): reads
    the tier's ``_torch``, ``_arange_cache``, ``_recycler``, ``_copy_threads``,
    ``block_size`` and ``layout``."""

    _torch: Any
    _arange_cache: dict[int, Any]
    _recycler: _Recycler
    _copy_threads: CopyThreads
    block_size: int
    layout: KVLayout

    def _arange(self, n: int) -> Any:
        a = self._arange_cache.get(n)
        if a is None:
            a = self._torch.arange(n, dtype=self._torch.int64) * _MIX
            self._arange_cache[n] = a
        return a

    def _pattern(self, fingerprint: int, numel: int) -> Any:
        """int16 words derived from ``fingerprint``: cheap, deterministic, position-mixed."""
        fp = fingerprint & _U64
        seed = (fp ^ (fp >> 29) ^ (fp >> 47)) & 0x7FFFFFFF
        words = (self._arange(numel) + seed) & 0xFFFF
        return words.to(self._torch.int16)

    @staticmethod
    def _header(fingerprint: int) -> bytes:
        return int(fingerprint).to_bytes(16, "little", signed=True)

    def _encode_into(self, view16: Any, fingerprint: int) -> None:
        """Fill ``view16`` (an int16 view of one block / image) from ``fingerprint``."""
        torch = self._torch
        if not isinstance(fingerprint, int) or not -(2**127) <= fingerprint < 2**127:
            raise TypeError(f"a fingerprint page must be an int, got {fingerprint!r}")
        view16.copy_(self._pattern(fingerprint, view16.numel()).view(view16.shape))
        head = torch.frombuffer(bytearray(self._header(fingerprint)), dtype=torch.int16)
        view16[0, 0, 0, :_HEADER_INT16] = head

    def _decode(self, view16: Any) -> int | None:
        """The fingerprint of a block, or None when any byte differs from its encoding."""
        torch = self._torch
        raw = view16[0, 0, 0, :_HEADER_INT16].clone().numpy().tobytes()
        fingerprint = int.from_bytes(raw, "little", signed=True)
        expect = torch.empty_like(view16)
        self._encode_into(expect, fingerprint)
        return fingerprint if torch.equal(expect, view16) else None

    def _block_view(self, chunk: Any, b: int) -> Any:
        bs = self.block_size
        return chunk[:, :, b * bs : (b + 1) * bs, :]

    def _copy_in(self, slot: Any, pages: Sequence[Any]) -> None:
        """Write one chunk's tensor pages into its slot. CPU pages of the slot's dtype
        are copied as raw 16-bit words through numpy (``concatenate`` into the slot,
        which releases the GIL), the blocks split over ``_copy_threads`` threads;
        anything else block by block with torch (converting dtype, across devices).
        Not torch for the common case: each ``copy_`` of a 2 MiB block is its own
        thread-pool round, and on a busy 2-core box every round waits for a descheduled
        worker thread (0.13 GiB/s against 2-3 GiB/s through numpy). One split per chunk
        costs one round, and on a quiet box uses the cores lmcache's own torch copies use
        (figures: docs/lmcache_tier.md, ``benchmarks/bench_lmcache.py``)."""
        import numpy

        torch = self._torch
        shape = self.block_shape()
        views = [page.view(shape) for page in pages]
        if all(v.device.type == "cpu" and v.dtype == slot.dtype for v in views):
            words = [v.detach().view(torch.int16).numpy() for v in views]
            out = slot.view(torch.int16).numpy()
            bs = self.block_size
            self._copy_threads.run(
                lambda lo, hi: numpy.concatenate(
                    words[lo:hi], axis=2, out=out[:, :, lo * bs : hi * bs]
                ),
                len(words),
            )
            return
        for b, v in enumerate(views):
            self._block_view(slot, b).copy_(v)

    def _copy_out(self, slot: Any, lo: int, hi: int) -> list[Any]:
        """Blocks ``[lo, hi)`` of a slot as contiguous pages: one copy into a recycled
        block-major buffer, whose blocks are returned as views. The copy is one torch
        ``copy_`` of the whole range: one thread-pool round per chunk, so a busy box
        costs one wait, not one per block."""
        two, layers, _, hidden = slot.shape
        bs, n = self.block_size, hi - lo
        buf = self._recycler.take()[:n]
        src = slot[:, :, lo * bs : hi * bs, :].view(two, layers, n, bs, hidden)
        buf.copy_(src.permute(2, 0, 1, 3, 4))
        return list(buf.unbind(0))

    def block_shape(self) -> tuple[int, ...]:
        """Shape of one page with ``page_format="tensor"``."""
        return (2, self.layout.num_layers, self.block_size, self.layout.hidden)
