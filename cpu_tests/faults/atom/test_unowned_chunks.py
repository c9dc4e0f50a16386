"""``WorkerFaults``' chunk counter for ``copy_out_failure`` over a stand-in lmcache
engine: it must count a chunk lmcache allocated and neither freed nor holds in its CPU
pool, and it must never keep a chunk alive itself (lmcache 0.5.6 frees a chunk nobody
holds in ``TensorMemoryObj.__del__``; a counter holding chunks strongly stops that and
then counts its own references as a leak)."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import pytest

from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.atom.worker_faults import WorkerFaults


class Allocator:
    """lmcache's allocator as the counter sees it: ``free`` and ``batched_free``."""

    def __init__(self) -> None:
        self.frees = 0

    def free(self, chunk: Chunk) -> None:
        chunk.valid = False
        self.frees += 1

    def batched_free(self, chunks: list[Chunk]) -> None:
        for chunk in chunks:
            chunk.valid = False
            self.frees += 1


class Chunk:
    """Stands in for lmcache's ``TensorMemoryObj``: weakly referenceable (``object()``
    is not) and, like lmcache 0.5.6's, freed by its finaliser when nobody holds it,
    unless ``finaliser`` is off (a chunk that would really leak)."""

    finaliser = True

    def __init__(self, allocator: Allocator) -> None:
        self.parent_allocator, self.valid = allocator, True

    def __del__(self) -> None:
        if self.finaliser and self.valid:
            self.parent_allocator.free(self)


class NoFinaliser(Chunk):
    finaliser = False


def _armed(kind: type[Chunk] = Chunk) -> tuple[WorkerFaults, Any, list[tuple[str, dict]]]:
    allocator, events = Allocator(), []
    engine = SimpleNamespace(
        gpu_connector=SimpleNamespace(batched_from_gpu=lambda chunks: None),
        storage_manager=SimpleNamespace(
            allocate=lambda: kind(allocator),
            local_cpu_backend=SimpleNamespace(hot_cache={}),
        ),
    )
    faults = WorkerFaults.__new__(WorkerFaults)
    faults.spec = FaultSpec(fail_copy_out=1)
    faults.log = SimpleNamespace(record=lambda kind, **fields: events.append((kind, fields)))
    faults.allocated, faults.dropped_unfreed, faults._cpu_pool = {}, 0, None
    faults._fail_copy_out(engine, 1)
    return faults, engine, events


def _failed_store(engine: Any, n: int) -> list[Any]:
    """What lmcache's store does up to the failed copy: allocate, then copy (raises)."""
    chunks = [engine.storage_manager.allocate() for _ in range(n)]
    try:
        engine.gpu_connector.batched_from_gpu(chunks)
    except RuntimeError:
        pass  # as ATOM's _guard: logged, then dropped with its traceback
    else:
        pytest.fail("the armed copy did not raise")
    return chunks


def test_none_without_the_fault():
    faults = WorkerFaults.__new__(WorkerFaults)
    faults.spec, faults.allocated, faults.dropped_unfreed = FaultSpec(), {}, 0
    assert faults.unowned_chunks() is None  # the quiescent record leaves it out


def test_chunks_a_failed_store_drops_are_freed_by_their_finaliser_and_not_counted():
    faults, engine, events = _armed()
    chunks = _failed_store(engine, 3)
    assert events == [("fault", {"injector": "copy_out_failure", "call": 1, "allocated": 3})]
    allocator = chunks[0].parent_allocator
    del chunks  # the store's frame is gone: nothing else holds them
    gc.collect()
    # A counter holding them strongly keeps them alive: no finaliser, 3 "unowned".
    assert allocator.frees == 3
    assert faults.unowned_chunks() == 0


def test_chunks_held_alive_outside_the_pool_are_counted():
    faults, engine, _ = _armed()
    kept = _failed_store(engine, 3)  # as an lmcache that kept the failed store's chunks
    assert faults.unowned_chunks() == 3
    engine.storage_manager.local_cpu_backend.hot_cache["k"] = kept[0]
    faults._cpu_pool = engine.storage_manager.local_cpu_backend
    assert faults.unowned_chunks() == 2  # one is in the CPU pool: owned
    kept[1].parent_allocator.free(kept[1])
    kept[2].parent_allocator.batched_free([kept[2]])
    assert faults.unowned_chunks() == 0  # freed either way: gone from the count


def test_chunks_dropped_without_a_free_are_counted():
    faults, engine, _ = _armed(NoFinaliser)
    chunks = _failed_store(engine, 3)
    del chunks  # dead, and their allocator never got them back
    gc.collect()
    assert faults.unowned_chunks() == 3
    again = [engine.storage_manager.allocate() for _ in range(6)]  # ids may come back
    for chunk in again:
        chunk.parent_allocator.free(chunk)
    assert faults.unowned_chunks() == 3
