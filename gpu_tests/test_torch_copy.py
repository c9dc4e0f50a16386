"""The device copy engine alone: batched scattered restores are byte-exact, leave every
other block untouched, fence only by events, and refuse what they cannot restore.

Every check draws fresh random pages (never zeros) and poisons the destination first.
"""

from __future__ import annotations

import pytest
import torch

from gpu_tests import device_stack as ds
from reference import torch_copy as tc
from reference.errors import RestoreFenceError
from reference.types import OperationId

KIB = 1024
# (bytes per block, dtype): the benchmark's sizes, plus an odd one moved as int16 words
BLOCKS = [
    (8 * KIB, "bfloat16"),
    (32 * KIB, "bfloat16"),
    (256 * KIB, "float16"),
    (2048 * KIB, "bfloat16"),
    (6 * 2 + 2, "bfloat16"),  # 14 bytes: 7 elements, moved as 7 int16 words
]


WAYS = ["dma", "mapped:triton", "mapped:index", "staged"]


def _setup(device, block_bytes, dtype_name, n, way="auto", seed=None):
    dtype = getattr(torch, dtype_name)
    elems = block_bytes // torch.empty((), dtype=dtype).element_size()
    pool = tc.PinnedHostPool(3 * n + 1, (elems,), dtype)
    kv = tc.DeviceKvPages(2 * n + 5, (elems,), dtype, device)
    method, _, gather = way.partition(":")
    try:
        engine = tc.TorchCopyEngine(kv, pool, method=method, gather=gather or "auto")
    except RuntimeError as exc:  # e.g. no batched DMA on HIP, no Triton installed
        pytest.skip(f"{way} not available here: {exc}")
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
    assert engine.method == way.partition(":")[0]
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
@pytest.mark.parametrize("way", ["auto", "dma"])
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
        other = tc.PinnedHostPool(len(slots), pool.page_shape, pool.dtype)
        pages = other.take(range(len(slots)))
    elif fault == "size":
        pages = [data[s][:-1].clone() for s in slots]
    with pytest.raises(RestoreFenceError, match="load:fence#1"):
        engine.enqueue(OperationId("fence", 1), pages, blocks, None, "fence")
    assert engine.in_flight == 0
    engine.synchronize()
    ds.check_restored(kv, [], [], seed)  # nothing was written
