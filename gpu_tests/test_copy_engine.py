"""The device copy engine alone: batched scattered restores are byte-exact, leave every
other block untouched, fence only by events, and refuse what they cannot restore.

Every check draws fresh random pages (never zeros) and poisons the destination first.
"""

from __future__ import annotations

import pytest
import torch

from gpu_tests import device_stack as ds
from kvfault.reference import OperationId, RestoreFenceError
from kvfault.reference.device import (
    DeviceKvPages,
    HostPage,
    PinnedHostPool,
    TorchCopyEngine,
    launch,
)

KIB = 1024
# (bytes per block, dtype): the benchmark's sizes, plus an odd one moved as int16 words
BLOCKS = [
    (8 * KIB, "bfloat16"),
    (32 * KIB, "bfloat16"),
    (256 * KIB, "float16"),
    (2048 * KIB, "bfloat16"),
    (6 * 2 + 2, "bfloat16"),  # 14 bytes: 7 elements, moved as 7 int16 words
]


# "rocm:..." is the path a ROCm build of torch takes, forced on CUDA as well
# (runtime="torch": no batched DMA, torch's own stream ordering; method "auto" must then
# pick the mapped gather), so every GPU run checks it.
WAYS = ["dma", "mapped:triton", "mapped:prefetch", "mapped:index", "staged", "rocm:triton"]
WAYS += ["rocm:index", "split"]


def _engine_args(way: str) -> dict:
    """``TorchCopyEngine`` keyword arguments for a way: ``method[:gather]``."""
    method, _, gather = way.partition(":")
    if method == "rocm":
        return {"method": "auto", "gather": gather or "auto", "runtime": "torch"}
    return {"method": method, "gather": gather or "auto"}


def _method_of(way: str) -> str:
    """The method a way must end up taking."""
    method = way.partition(":")[0]
    return "mapped" if method == "rocm" else method


def _setup(device, block_bytes, dtype_name, n, way="auto", seed=None):
    dtype = getattr(torch, dtype_name)
    elems = block_bytes // torch.empty((), dtype=dtype).element_size()
    pool = PinnedHostPool(3 * n + 1, (elems,), dtype)
    kv = DeviceKvPages(2 * n + 5, (elems,), dtype, device)
    gather = way.partition(":")[2]
    try:
        engine = TorchCopyEngine(kv, pool, **_engine_args(way))
    except RuntimeError as exc:  # e.g. no batched DMA on HIP, no Triton installed
        pytest.skip(f"{way} not available here: {exc}")
    if way.startswith("rocm") and engine.method != "mapped":
        pytest.fail(
            f"{way}: without the CUDA runtime 'auto' took {engine.method!r}, not the mapped gather"
        )
    if gather and engine.gather != gather:
        pytest.skip(f"gather {gather!r} not available here (got {engine.gather!r})")
    seed = ds.fresh_seed() if seed is None else seed
    g = torch.Generator().manual_seed(seed)
    data = ds.random_bytes((pool.num_slots, elems), dtype, seed)
    pool.buffer.copy_(data)
    slots = torch.randperm(pool.num_slots, generator=g)[:n].tolist()
    blocks = torch.randperm(kv.num_blocks, generator=g)[:n].tolist()
    ds.poison(kv)
    return pool, kv, engine, slots, blocks, data, seed


def _wait(engine, ticket) -> None:
    # tests may wait; the worker never does. is_complete is still how completion is seen.
    engine.synchronize()
    assert engine.is_complete(ticket)


@pytest.mark.parametrize("block_bytes,dtype_name", BLOCKS)
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("source", ["batch", "pages", "tensors"])
def test_scattered_restore_is_byte_exact(device, block_bytes, dtype_name, way, source):
    n = 24 if block_bytes >= 2048 * KIB else 97
    pool, kv, engine, slots, blocks, data, seed = _setup(device, block_bytes, dtype_name, n, way)
    assert engine.method == _method_of(way)
    if source == "batch":
        pages = pool.take(slots)
    elif source == "pages":
        pages = list(pool.take(slots))
    else:  # plain host tensors, not pool pages: they go through a staging buffer
        pages = [data[s].clone() for s in slots]
    ticket = engine.enqueue(OperationId("r", 1), pages, blocks, None, "r")
    assert engine.in_flight == 1
    _wait(engine, ticket)
    assert engine.in_flight == 0
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_state_is_published_only_when_the_copy_completes(way, device, device_work):
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 16, way)
    state = ds.random_bytes((3, 1000), torch.float32, seed + 1)
    device_work.queue(1.0, engine.stream)  # the copy stream is busy for a while
    ticket = engine.enqueue(OperationId("s", 1), pool.take(slots), blocks, state, "s")
    assert not engine.is_complete(ticket)
    assert kv.read_state("s") is None, "state visible before its copy completed"
    _wait(engine, ticket)
    got = kv.read_state("s")
    assert got is not None and got.device.type == "cuda"
    assert torch.equal(ds.as_bytes(got), ds.as_bytes(state)), f"seed {seed}"
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_enqueue_never_waits_for_a_busy_copy_stream(way, device, device_work):
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 256 * KIB, "bfloat16", 64, way)
    device_work.queue(1.5, engine.stream)
    ticket = engine.enqueue(OperationId("b", 1), pool.take(slots), blocks, None, "b")
    # enqueue returned while the stream still had its backlog: it did not wait for it
    assert not engine.is_complete(ticket)
    assert not engine.is_complete(ticket)  # polling again is harmless
    _wait(engine, ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_restore_lands_after_work_queued_before_it(way, device, device_work):
    """A forward still writing a block when its restore is enqueued cannot overwrite the
    restored bytes: the restore is ordered after the current stream's queued work."""
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 16, way)
    device_work.queue(0.5)  # current stream: a long forward ...
    kv.pages[blocks[0]].fill_(3.0)  # ... that then writes a block being restored
    ticket = engine.enqueue(OperationId("o", 1), pool.take(slots), blocks, None, "o")
    _wait(engine, ticket)
    torch.cuda.synchronize()
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_two_restores_in_flight_complete_independently(way, device):
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 40, way)
    a = engine.enqueue(OperationId("a", 1), pool.take(slots[:25]), blocks[:25], None, "a")
    b = engine.enqueue(OperationId("b", 2), pool.take(slots[25:]), blocks[25:], None, "b")
    assert engine.in_flight == 2
    _wait(engine, b)
    assert engine.is_complete(a)  # one stream: a was queued before b
    assert engine.in_flight == 0
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_empty_restore_completes(way, device):
    pool, kv, engine, *_ = _setup(device, 8 * KIB, "bfloat16", 4, way)
    ticket = engine.enqueue(OperationId("e", 1), [], [], None, "e")
    _wait(engine, ticket)
    ds.check_restored(kv, [], [], 0)


@pytest.mark.parametrize(
    "fault",
    ["length", "range", "negative", "duplicate", "evicted", "evicted_list", "other_pool", "size"],
)
@pytest.mark.parametrize("way", ["auto", "dma", "mapped:prefetch", "rocm"])
def test_fence_raises_and_queues_nothing(device, way, fault):
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 12, way)
    pages = pool.take(slots)
    if fault == "length":
        blocks = blocks[:-1]
    elif fault == "range":
        blocks[3] = kv.num_blocks
    elif fault == "negative":
        blocks[0] = -1
    elif fault == "duplicate":
        blocks[5] = blocks[2]
    elif fault in ("evicted", "evicted_list"):
        pool.free(pages[7])  # the tier dropped it between the retrieve and the restore
        if fault == "evicted_list":
            pages = list(pages)
    elif fault == "other_pool":
        other = PinnedHostPool(len(slots), pool.page_shape, pool.dtype)
        pages = other.take(range(len(slots)))
    elif fault == "size":
        pages = [data[s][:-1].clone() for s in slots]
    with pytest.raises(RestoreFenceError, match="load:fence#1"):
        engine.enqueue(OperationId("fence", 1), pages, blocks, None, "fence")
    assert engine.in_flight == 0
    assert engine.stream.query(), "work still in flight after a fence error"
    engine.synchronize()
    ds.check_restored(kv, [], [], seed)  # nothing was written


def test_gather_uses_the_direct_launcher_where_triton_is_installed(device):
    """The mapped path launches its compiled kernel directly (no per-call binding); the
    jit launch is only a fallback for a Triton without that interface."""
    if launch._triton_gather is None:
        pytest.skip("Triton is not installed")
    *_, engine, _, _, _, _ = _setup(device, 32 * KIB, "bfloat16", 8, "mapped:triton")
    assert engine._tg is not None and engine._move == engine._move_triton


def test_rocm_path_calls_nothing_but_torch(device):
    """runtime="torch" (what a ROCm build does): no batched DMA even for large pages,
    stream ordering through torch's event, and asking for DMA is refused at construction."""
    pool, kv, engine, *_ = _setup(device, 2048 * KIB, "bfloat16", 4, "rocm")
    assert engine.method == "mapped" and engine._dma is None
    assert engine._after_current.lib is None  # torch.cuda.Event, not the raw runtime
    with pytest.raises(RuntimeError, match="runtime 'torch'"):
        TorchCopyEngine(kv, pool, method="dma", runtime="torch")
    with pytest.raises(ValueError, match="runtime is"):
        TorchCopyEngine(kv, pool, runtime="rocm")


@pytest.mark.parametrize("chunk", [0, 3])
@pytest.mark.parametrize("way", ["dma", "mapped:triton", "mapped:prefetch", "rocm:triton"])
def test_runs_of_consecutive_pages_restore_byte_exact(device, way, chunk):
    """A tier keeps a chunk's pages adjacent: runs where slots and blocks are both
    consecutive go as one larger DMA copy each (and in several batch calls with
    ``dma_chunk``); mixed with scattered blocks, every byte still lands."""
    pool, kv, engine, _, _, data, seed = _setup(device, 32 * KIB, "bfloat16", 40, way)
    engine.dma_chunk = chunk
    g = torch.Generator().manual_seed(seed)
    slots = list(range(5, 17)) + [40, 41] + list(range(60, 70))
    blocks = list(range(30, 42)) + [7, 9] + list(range(50, 60))
    tail = torch.randperm(len(slots) - 14, generator=g).tolist()  # shuffle the last run
    slots = slots[:14] + [slots[14 + i] for i in tail]
    ticket = engine.enqueue(OperationId("run", 1), pool.take(slots), tuple(blocks), None, "r")
    _wait(engine, ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("way", WAYS)
def test_index_buffers_are_not_reused_while_a_restore_reads_them(way, device, device_work):
    """Ten restores queued behind a busy copy stream, none observed complete: each reads
    its own pinned index buffer, so every one lands where it was sent."""
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 8 * KIB, "bfloat16", 60, way)
    device_work.queue(0.3, engine.stream)
    tickets = [
        engine.enqueue(OperationId("q", i), pool.take(slots[i::10]), blocks[i::10], None, "q")
        for i in range(10)
    ]
    assert engine.in_flight == 10
    _wait(engine, tickets[-1])
    assert all(engine.is_complete(t) for t in tickets) and engine.in_flight == 0
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)
    # and a later restore reuses a free buffer rather than allocating another
    count = len(engine._bufs)
    more = engine.enqueue(OperationId("q", 10), pool.take(slots[:5]), blocks[:5], None, "q")
    _wait(engine, more)
    assert len(engine._bufs) == count


@pytest.mark.parametrize("form", ["tensor", "numpy", "list"])
def test_blocks_as_tensor_array_or_list(device, form):
    import numpy as np

    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 33)
    arg = {
        "tensor": torch.tensor(blocks),
        "numpy": np.array(blocks, dtype=np.int32),
        "list": list(blocks),
    }[form]
    ticket = engine.enqueue(OperationId("f", 1), pool.take(slots), arg, None, "f")
    _wait(engine, ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


@pytest.mark.parametrize("fault", ["float_block", "float_tensor", "forged_slot", "stale_batch"])
def test_more_fences_raise_and_queue_nothing(device, fault):
    pool, kv, engine, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 12)
    pages = pool.take(slots)
    if fault == "float_block":
        blocks[4] = 2.5
    elif fault == "float_tensor":
        blocks = torch.tensor(blocks, dtype=torch.float32)
    elif fault == "forged_slot":
        pages = list(pages)
        pages[3] = HostPage(pool, pool.num_slots + 3, 0)
    elif fault == "stale_batch":
        pool.free(pages[0])
        pool.free(pages[11])
    with pytest.raises(RestoreFenceError, match="load:fence#1"):
        engine.enqueue(OperationId("fence", 1), pages, blocks, None, "fence")
    assert engine.in_flight == 0
    engine.synchronize()
    ds.check_restored(kv, [], [], seed)


@pytest.mark.parametrize("share", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("block_bytes", [8 * KIB, 2048 * KIB])
def test_split_restores_byte_exact_at_any_share(device, block_bytes, share):
    """The copy engines take the first share of the blocks, the gather the rest, on two
    streams; the fence covers both."""
    n = 24 if block_bytes >= 2048 * KIB else 97
    pool, kv, _, slots, blocks, data, seed = _setup(device, block_bytes, "bfloat16", n, "dma")
    try:
        engine = TorchCopyEngine(kv, pool, method="split", split=share)
    except RuntimeError as exc:
        pytest.skip(f"split not available here: {exc}")
    assert engine.method == "split" and engine.choice.path == f"split:{share:.2f}"
    ticket = engine.enqueue(OperationId("s", 1), pool.take(slots), blocks, None, "s")
    _wait(engine, ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)


def test_split_whose_dma_part_fails_raises_and_leaves_nothing_in_flight(device, monkeypatch):
    pool, kv, _, slots, blocks, data, seed = _setup(device, 32 * KIB, "bfloat16", 40, "dma")
    try:
        engine = TorchCopyEngine(kv, pool, method="split", split=0.5)
    except RuntimeError as exc:
        pytest.skip(f"split not available here: {exc}")

    def refuse(*_args):
        raise RuntimeError("cudaMemcpyBatchAsync failed with cudaError 1")

    monkeypatch.setattr(engine._dma, "copy", refuse)
    with pytest.raises(RestoreFenceError, match="the device refused the restore"):
        engine.enqueue(OperationId("s", 1), pool.take(slots), blocks, None, "s")
    assert engine.in_flight == 0
    assert engine.stream.query() and engine._fork.other.query(), "work left in flight"
    # the index buffer is free again and the next restore is whole
    monkeypatch.undo()
    ds.poison(kv)
    ticket = engine.enqueue(OperationId("s", 2), pool.take(slots), blocks, None, "s")
    _wait(engine, ticket)
    ds.check_restored(kv, [data[s] for s in slots], blocks, seed)
