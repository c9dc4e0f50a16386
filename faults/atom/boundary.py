"""The boundaries of ATOM that a CPU cannot run, faked; everything else of ATOM is its own.

Installed in an ATOM server's processes (never in the campaign process) before ATOM is
imported. Each fake stands where ATOM meets hardware or a package this machine lacks:

- ``aiter``: a tensor-parallel world (one rank, or the rank ``set_tp_rank`` gives a
  worker process of a TP server) and its dtype table;
- the Triton pack/unpack kernels (``dense/triton_kv_staging``): a CPU pack/unpack with
  the kernels' chunk-major byte layout (``[chunk: seg0 blocks | seg1 blocks ...]...``);
- CUDA streams, events and device contexts: no-ops, since CPU copies finish in order;
- the device ATOM's offload connector believes it runs on: ``HostDevice``, a GPU whose
  memory is host memory (ATOM refuses a CPU device, so its connector is told, after it
  is built, that its KV lives on such a GPU);
- the host-wide socket directory lmcache derives lookup paths under (``vllm.envs``'
  ``VLLM_RPC_BASE_PATH``): one private directory per simulated host, shared by the
  servers of that host exactly as ``/tmp/vllm_rpc`` is shared by real ones.
"""

from __future__ import annotations

import enum
import os
import sys
import types
from typing import Any, Iterator, Literal, Sequence

TP_FIELDS = ("rank_in_group", "world_size", "rank", "local_rank")


class HostDevice(str):
    """A device ATOM sees as ``cuda`` (``.type``) whose tensors torch allocates on the
    host (the string is ``"cpu"``)."""

    type = "cuda"
    index = 0  # type: ignore[assignment]  # torch.device's index: shadows str.index on purpose

    def __new__(cls) -> HostDevice:
        return super().__new__(cls, "cpu")


class _Unavailable:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the atom tier replaces ATOM's process manager; not available")


class _TpGroup:
    rank_in_group = 0
    world_size = 1
    rank = 0
    local_rank = 0
    device_group = None
    cpu_group = None


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def install_aiter() -> None:
    """A one-rank tensor-parallel world and the KV dtype table ATOM reads."""
    import torch

    if "aiter" in sys.modules:
        return
    d_dtypes = {
        "auto": torch.bfloat16,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp32": torch.float32,
        "fp8": torch.uint8,
        "int8": torch.int8,
    }
    dtypes = _module("aiter.dtypes", d_dtypes=d_dtypes, fp8=torch.uint8, bf16=torch.bfloat16)
    group = _TpGroup()
    parallel_state = _module(
        "aiter.dist.parallel_state",
        get_tp_group=lambda: group,
        get_pp_group=lambda: group,
        get_dp_group=lambda: group,
    )
    # ATOM's process manager (replaced in this tier) imports aiter's shared-memory
    # queue; nothing here constructs one.
    shm = _module("aiter.dist.shm_broadcast", MessageQueue=_Unavailable)
    dist = _module("aiter.dist", parallel_state=parallel_state, shm_broadcast=shm, __path__=[])
    # ATOM before 7672123 (#1768) imports these two at module level (atom.config,
    # atom.quant_spec): the quantisation kinds by name, the dtype table by its old path.
    QuantType = enum.Enum("QuantType", "No per_Tensor per_Token per_1x32 per_1x128")
    utility = _module(
        "aiter.utility",
        dtypes=_module("aiter.utility.dtypes", d_dtypes=d_dtypes),
        __path__=[],
    )
    _module("aiter", dtypes=dtypes, dist=dist, utility=utility, QuantType=QuantType, __path__=[])


def set_tp_rank(rank: int, world_size: int) -> None:
    """This process is ``rank`` of a tensor-parallel world of ``world_size`` (what
    aiter's TP group tells ATOM after its distributed init); installs the fake aiter
    first when it is not."""
    if not 0 <= rank < world_size:
        raise ValueError(f"TP rank {rank} is outside a world of {world_size}")
    install_aiter()
    group = sys.modules["aiter.dist.parallel_state"].get_tp_group()
    group.rank_in_group = group.rank = group.local_rank = rank
    group.world_size = world_size


def kv_dtype(name: str) -> Any:
    """The torch dtype of a KV cache dtype name, from the fake aiter's table (the one
    ATOM's offload reads for lmcache's metadata)."""
    install_aiter()
    return sys.modules["aiter.dtypes"].d_dtypes[name]


class _Stream:
    # The memory a stream's copies touch is host memory (ATOM's DSV4 codec checks a
    # stream's device against its own).
    device = "cpu"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class _Event:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True


class _NullContext:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> Literal[False]:
        return False


def install_cuda_streams() -> None:
    """CUDA streams, events and device contexts as no-ops: a CPU copy is done when the
    call returns, so every fence ATOM waits on has already passed."""
    import torch

    cuda = torch.cuda
    cuda.Stream = _Stream
    cuda.Event = _Event
    cuda.stream = _NullContext
    cuda.device = _NullContext
    cuda.current_stream = lambda *a, **k: _Stream()
    cuda.synchronize = lambda *a, **k: None


def _segments_bytes(segments: list[Any]) -> list[Any]:
    import torch

    return [s.contiguous().view(-1).view(torch.uint8) for s in segments]


def _chunk_major_runs(
    segment_tensors: list[Any],
    segment_block_bytes: Sequence[Any],
    chunk_block_counts: Sequence[Any],
    block_ids: Sequence[int],
) -> Iterator[tuple[Any, slice, slice]]:
    """The byte layout both Triton kernels share, as ``(flat, block slice, buffer
    slice)`` runs: chunk by chunk, within a chunk segment by segment, within a segment
    the chunk's blocks in order."""
    flats = _segments_bytes(segment_tensors)
    per_block = sum(int(b) for b in segment_block_bytes)
    base = 0
    offset = 0
    for nblocks in chunk_block_counts:
        nblocks = int(nblocks)
        ids = block_ids[offset : offset + nblocks]
        prefix = 0
        for flat, nb in zip(flats, segment_block_bytes, strict=True):
            nb = int(nb)
            at = base + prefix * nblocks
            for i, b in enumerate(ids):
                yield flat, slice(b * nb, (b + 1) * nb), slice(at + i * nb, at + (i + 1) * nb)
            prefix += nb
        base += nblocks * per_block
        offset += nblocks


def fused_pack_chunk_major(
    segment_tensors: list[Any],
    segment_block_bytes: Sequence[Any],
    chunk_block_counts: Sequence[Any],
    block_ids: Sequence[int],
    device_buf: Any,
) -> None:
    """CPU stand-in for ATOM's Triton pack kernel, same byte layout
    (``_chunk_major_runs``): the blocks' bytes into ``device_buf``."""
    for flat, block, buf in _chunk_major_runs(
        segment_tensors, segment_block_bytes, chunk_block_counts, block_ids
    ):
        device_buf[buf] = flat[block]


def fused_unpack_chunk_major(
    device_buf: Any,
    segment_tensors: list[Any],
    segment_block_bytes: Sequence[Any],
    chunk_block_counts: Sequence[Any],
    block_ids: Sequence[int],
) -> None:
    """CPU stand-in for ATOM's Triton unpack kernel (the inverse of the pack)."""
    for flat, block, buf in _chunk_major_runs(
        segment_tensors, segment_block_bytes, chunk_block_counts, block_ids
    ):
        flat[block] = device_buf[buf]


# Where ATOM's dense Triton staging module has lived: under ``dense/`` at its main,
# directly under ``offload/`` in older commits.
KERNEL_MODULES = (
    "atom.kv_transfer.offload.dense.triton_kv_staging",
    "atom.kv_transfer.offload.triton_kv_staging",
)


def install_kernels() -> types.ModuleType:
    """The CPU pack/unpack under every name ATOM's Triton staging module has had."""
    mod = None
    for name in KERNEL_MODULES:
        mod = _module(
            name,
            fused_pack_chunk_major=fused_pack_chunk_major,
            fused_unpack_chunk_major=fused_unpack_chunk_major,
        )
    assert mod is not None
    return mod


def install_socket_dir(path: str | None) -> None:
    """lmcache puts lookup sockets under ``vllm.envs.VLLM_RPC_BASE_PATH`` when vllm is
    importable, else under ``/tmp/vllm_rpc``: give this simulated host its own. ``None``
    (a zygote, before any host exists) installs the shim with no directory yet."""
    if path is not None:
        os.makedirs(path, exist_ok=True)
    envs = sys.modules.get("vllm.envs")
    if envs is not None and getattr(envs, "__kvfault_shim__", False):
        vars(envs)["VLLM_RPC_BASE_PATH"] = path  # a forked server process: this host's directory
        return
    if "vllm" in sys.modules:
        return
    envs = _module("vllm.envs", VLLM_RPC_BASE_PATH=path, __kvfault_shim__=True)
    _module("vllm", envs=envs, __path__=[])


def install_all(socket_dir: str | None) -> None:
    install_aiter()
    install_cuda_streams()
    install_socket_dir(socket_dir)


def place_on_host_device(worker_connector: Any, kernels: types.ModuleType) -> bool:
    """Tell ATOM's dense worker connector (after ``register_kv_caches``) that its KV is on
    a ``HostDevice`` and that its Triton staging is ``kernels``. Feature-detected: True
    when the connector has the codec and GPU connector this expects."""
    impl = getattr(worker_connector, "_impl", worker_connector)
    codec = getattr(impl, "_codec", None)
    engine = getattr(impl, "_engine", None)
    gpu = getattr(engine, "gpu_connector", None)
    if codec is None or gpu is None:
        return False
    device = HostDevice()
    if hasattr(codec, "_fused_kv_staging"):
        codec._fused_kv_staging = kernels
    gpu.device = device
    return True
