"""A story's settle (``AtomRun.settle``): the host waits, stepping nothing, until no save
or load of ATOM's is left in a server's workers, at most its bound. The worker counts
ATOM's KV tasks through its executors' ``submit`` (``worker._KvWork``), queued ones
too; the scheduler asks every rank (``SchedulerProcess.settle``)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from types import SimpleNamespace

import pytest
from answering_link import AnsweringLink

from kvfault.faults.atom.scheduler import SchedulerProcess, WorkerRanks
from kvfault.faults.atom.worker import _KvWork


@pytest.mark.parametrize(
    "ranks, settled, calls",
    [
        pytest.param(((0,),), True, 1, id="nothing-in-flight"),
        pytest.param(((2, 1, 0),), True, 3, id="work-ends-while-waiting"),
        pytest.param(((1,),), False, None, id="never-ends-bounded"),
        pytest.param(((0,), (1, 1, 0)), True, 3, id="waits-for-every-rank"),
        pytest.param(((0,), (1,)), False, None, id="rank-1-never-ends-bounded"),
        pytest.param(((None,),), False, 1, id="cannot-count-waits-the-bound"),
    ],
)
def test_settle_waits_until_no_rank_has_kv_work_and_is_bounded(ranks, settled, calls):
    links = [AnsweringLink("kv_work_pending", *a) for a in ranks]  # one rank each
    side = SimpleNamespace(link=WorkerRanks(links))  # type: ignore[arg-type]
    assert SchedulerProcess.settle(side, 0.2) is settled  # type: ignore[arg-type]
    if calls is not None:
        assert links[-1].calls == calls
    else:
        assert links[-1].calls > 1  # it kept asking until the bound


def _until(predicate, bound_s: float = 10.0) -> bool:
    """Whether ``predicate`` holds within ``bound_s`` (a done callback runs after the
    future's waiters are woken)."""
    deadline = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_kv_work_counts_queued_and_running_tasks_until_each_is_done():
    gate = threading.Event()
    impl = SimpleNamespace(
        _save_executor=ThreadPoolExecutor(max_workers=1),
        _load_executor=ThreadPoolExecutor(max_workers=1),
    )
    work = _KvWork(impl)
    assert work.counted and work.pending == 0
    try:
        futures = [impl._save_executor.submit(gate.wait, 10) for _ in range(2)]  # one queued
        futures.append(impl._load_executor.submit(gate.wait, 10))
        assert work.pending == 3
        gate.set()
        wait(futures, timeout=10)
        assert _until(lambda: work.pending == 0)
    finally:
        gate.set()
        for executor in (impl._save_executor, impl._load_executor):
            executor.shutdown(wait=True)


def test_kv_work_uncounts_a_task_its_executor_refuses():
    impl = SimpleNamespace(
        _save_executor=ThreadPoolExecutor(max_workers=1),
        _load_executor=ThreadPoolExecutor(max_workers=1),
    )
    work = _KvWork(impl)
    impl._load_executor.shutdown()
    with pytest.raises(RuntimeError):
        impl._load_executor.submit(print)
    assert work.pending == 0
    impl._save_executor.shutdown()


def test_an_atom_without_kv_threads_cannot_be_counted():
    work = _KvWork(SimpleNamespace(_save_executor=ThreadPoolExecutor(max_workers=1)))
    assert not work.counted
