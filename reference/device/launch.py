"""Launch helpers the copy engine queues its work through, each with a fallback:

- stream ordering (``_StreamOrder``): the side stream waits for the current stream's
  work by one event record and one stream wait through the CUDA runtime torch loaded,
  or through torch's stream objects where that runtime is not at hand (HIP) or not
  wanted (``runtime="torch"``);
- batched DMA (``_BatchDma``): ``cudaMemcpyBatchAsync`` (CUDA runtime 12.8 and up),
  called through ctypes on the runtime torch loaded (``_loaded_cudart``);
- the gather kernel: a Triton kernel where Triton is installed (CUDA and ROCm), compiled
  once per engine and launched through its compiled launcher (``_TritonGather``), with
  ``_triton_gather`` (``kernel[grid](...)``) as the fallback. ``GATHER_BLOCK_WORDS`` and
  ``GATHER_WARPS`` are read at each compile, so a probe may retune them here.

Nothing here decides what to copy: ``copy_engine`` checks a restore and picks the path.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import TYPE_CHECKING, Any, Callable

import torch

from kvfault.reference.device.device_pages import device_backend
from kvfault.reference.device.host_pool import map_pinned

if TYPE_CHECKING:
    from kvfault.reference.device.ticket import _IndexBuffer


class _StreamOrder:
    """Make ``side`` wait for the work queued so far on the current stream: one event
    record and one stream wait, through the CUDA runtime torch loaded (a raw stream
    handle, a reused event: a few microseconds less than torch's stream objects on
    every restore), or through torch where that runtime is not at hand (HIP)."""

    lib: Any | None  # the CUDA runtime (ctypes); None: torch's stream objects
    raw: Any  # torch's raw current-stream getter, with the runtime
    event: Any  # a cudaEvent_t handle with the runtime, else a torch.cuda.Event

    def __init__(self, device: torch.device, side: Any, runtime: str = "auto"):
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.side = side
        self.lib = None
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        native = runtime == "auto" and device_backend() == "cuda" and raw is not None
        lib = _loaded_cudart() if native else None
        if lib is not None:
            ev = ctypes.c_void_p()
            with torch.cuda.device(self.index):
                ok = lib.cudaEventCreateWithFlags(ctypes.byref(ev), ctypes.c_uint(2)) == 0
            if ok:  # 2: cudaEventDisableTiming
                self.lib, self.raw, self.event = lib, raw, ev.value
                self.side_handle = side.cuda_stream
                self.record = lib.cudaEventRecord
                self.record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
                self.wait = lib.cudaStreamWaitEvent
                self.wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        if self.lib is None:
            self.event = torch.cuda.Event()

    def __call__(self) -> None:
        if self.lib is None:
            self.event.record(torch.cuda.current_stream(self.index))
            self.side.wait_event(self.event)
            return
        rc = self.record(self.event, self.raw(self.index))
        if rc == 0:
            rc = self.wait(self.side_handle, self.event, 0)
        if rc != 0:
            raise RuntimeError(f"ordering the restore after the current stream: cudaError {rc}")

    def __del__(self) -> None:
        if self.lib is not None:
            try:
                self.lib.cudaEventDestroy(ctypes.c_void_p(self.event))
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


class _Fork:
    """A second stream beside ``side`` for the split path: ``fork`` makes it wait for
    what ``side`` has queued so far, ``join`` makes ``side`` wait for what it was given
    since. Raw events and streams through the CUDA runtime torch loaded (the split needs
    that runtime anyway, for its DMA half)."""

    def __init__(self, lib: Any, side: int, other: Any, events: tuple[int, int]):
        self.lib = lib
        self.side_handle = side
        self.other = other  # the torch stream, kept alive with the fork
        self.other_handle = other.cuda_stream
        self.events = events
        self.record = lib.cudaEventRecord
        self.record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.wait = lib.cudaStreamWaitEvent
        self.wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]

    @classmethod
    def make(cls, device: torch.device, side: Any) -> _Fork | None:
        """The fork for ``side`` on ``device``; None without the CUDA runtime."""
        lib = _loaded_cudart() if device_backend() == "cuda" else None
        if lib is None:
            return None
        events: list[int] = []
        with torch.cuda.device(device):
            other = torch.cuda.Stream(device=device)
            for _ in range(2):
                ev = ctypes.c_void_p()
                if lib.cudaEventCreateWithFlags(ctypes.byref(ev), ctypes.c_uint(2)) != 0:
                    for e in events:
                        lib.cudaEventDestroy(ctypes.c_void_p(e))
                    return None
                events.append(int(ev.value or 0))
        return cls(lib, side.cuda_stream, other, (events[0], events[1]))

    def _order(self, event: int, after: int, waiter: int) -> None:
        rc = self.record(event, after)
        if rc == 0:
            rc = self.wait(waiter, event, 0)
        if rc != 0:
            raise RuntimeError(f"ordering the split's two streams: cudaError {rc}")

    def fork(self) -> None:
        self._order(self.events[0], self.side_handle, self.other_handle)

    def join(self) -> None:
        self._order(self.events[1], self.other_handle, self.side_handle)

    def __del__(self) -> None:
        try:
            for e in self.events:
                self.lib.cudaEventDestroy(ctypes.c_void_p(e))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


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
        self.fail = ctypes.c_size_t(0)  # CUDA 12.8/12.9 report the failing copy here

    @classmethod
    def load(cls) -> _BatchDma | None:
        """The runtime's batched copy, or None (HIP, an older runtime, no library)."""
        if cls._loaded is False:
            cls._loaded = cls._load()
        loaded = cls._loaded
        return loaded if isinstance(loaded, _BatchDma) else None

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

    def copy(self, dsts: int, srcs: int, sizes: int, count: int, stream: int) -> None:
        """Queue ``count`` copies on ``stream``: host arrays of destination addresses,
        source addresses and sizes (int64) at ``dsts``, ``srcs``, ``sizes``."""
        args: list[Any] = [
            dsts,
            srcs,
            sizes,
            count,
            ctypes.addressof(self.attrs),
            ctypes.addressof(self.attr_idx),
            1,
        ]
        if self.version < 13000:
            args.append(ctypes.addressof(self.fail))
        args.append(stream)
        rc = self.fn(*args)
        if rc != 0:
            raise RuntimeError(f"cudaMemcpyBatchAsync failed with cudaError {rc}")


@functools.cache
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

# Gather kernel shape: one program moves up to GATHER_BLOCK_WORDS words of one row.
# On the H200 (PCIe 5) 4096 words and 8 warps read 51.1 GB/s at 32 KiB and 256 KiB pages,
# 2048/4 50.9, 1024/4 50.4-50.6 (benchmarks/probe_enqueue.py): the shape barely matters.
GATHER_BLOCK_WORDS = 4096
GATHER_WARPS = 8

# The gather through ``kernel[grid](...)``; None without Triton.
_triton_gather: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None] | None
_triton_gather = None

if triton is not None:

    @triton.jit
    def _gather_kernel(  # type: ignore[no-untyped-def]  # Triton reads a kernel's annotations
        src,
        dst,
        src_idx,
        dst_idx,
        words,
        BLOCK: tl.constexpr,
        SRC_IDX: tl.constexpr = True,
        DST_IDX: tl.constexpr = True,
    ):
        # dst[dst_idx[row]] = src[src_idx[row]]; without SRC_IDX (DST_IDX) the source
        # (destination) row is ``row`` itself: the prefetch and scatter halves
        row = tl.program_id(0)
        col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        if SRC_IDX:
            s = tl.load(src_idx + row).to(tl.int64)
        else:
            s = row.to(tl.int64)
        if DST_IDX:
            d = tl.load(dst_idx + row).to(tl.int64)
        else:
            d = row.to(tl.int64)
        mask = col < words
        tl.store(dst + d * words + col, tl.load(src + s * words + col, mask=mask), mask=mask)

    def _gather_block(words: int) -> int:
        return min(GATHER_BLOCK_WORDS, triton.next_power_of_2(words))

    def _gather_by_grid(
        src: torch.Tensor, dst: torch.Tensor, src_idx: torch.Tensor, dst_idx: torch.Tensor
    ) -> None:
        """One kernel: ``dst[dst_idx[i]] = src[src_idx[i]]``, every row at once, reading
        ``src`` (the mapped pool) across the bus and writing the pages directly."""
        words = dst.shape[1]
        block = _gather_block(words)
        grid = (dst_idx.numel(), triton.cdiv(words, block))
        _gather_kernel[grid](src, dst, src_idx, dst_idx, words, BLOCK=block, num_warps=GATHER_WARPS)

    _triton_gather = _gather_by_grid


class _TritonGather:
    """The gather kernel compiled once for one engine (its pool, its pages, its row
    length) and launched through the compiled kernel's own launcher: no argument
    binding, specialization key or cache lookup per restore. Valid because every launch
    passes arguments that specialize alike (16-byte aligned pointers, the same
    ``words``); the engine's probe checks the bytes it moves before using it."""

    def __init__(self, kernel: Any, words: int, block: int, src_idx: bool, dst_idx: bool):
        self.run = kernel.run  # loads the module on the current device
        self.flags = (src_idx, dst_idx)
        self.function = kernel.function
        self.packed = kernel.packed_metadata
        self.words = words
        self.block = block
        self.cols = -(-words // block)

    @classmethod
    def compile(
        cls,
        src: torch.Tensor,
        dst: torch.Tensor,
        index: _IndexBuffer,
        src_idx: bool = True,
        dst_idx: bool = True,
    ) -> _TritonGather | None:
        """The kernel for rows of ``dst``'s length; ``src_idx`` / ``dst_idx`` False: the
        source / destination row is the program's own row (no index read)."""
        if triton is None:
            return None
        words = dst.shape[1]
        block = _gather_block(words)
        try:
            with torch.cuda.device(dst.device):
                idx = map_pinned(index.host, dst.device)
                if idx is None:
                    return None
                kernel = _gather_kernel.warmup(
                    src,
                    dst,
                    idx[0],
                    idx[1],
                    words,
                    BLOCK=block,
                    SRC_IDX=src_idx,
                    DST_IDX=dst_idx,
                    num_warps=GATHER_WARPS,
                    grid=(1,),
                )
                if hasattr(kernel, "result"):
                    kernel = kernel.result()
                return cls(kernel, words, block, src_idx, dst_idx)
        except Exception:  # noqa: BLE001 - another Triton: the engine uses kernel[grid]
            return None

    def __call__(self, stream: int, src: int, dst: int, src_idx: int, dst_idx: int, n: int) -> None:
        self.run(
            n,
            self.cols,
            1,
            stream,
            self.function,
            self.packed,
            None,
            None,
            None,
            src,
            dst,
            src_idx,
            dst_idx,
            self.words,
            self.block,
            *self.flags,
        )
