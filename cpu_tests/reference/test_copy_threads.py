"""``CopyThreads``: the real tier's slot copies split over threads. Every block is
copied exactly once, an error in any part is raised only once every part is done, and
``close`` leaves no helper thread behind."""

from __future__ import annotations

import threading
import time

import pytest

from kvfault.reference.tiers.lmcache_pages import CopyThreads


def _helpers_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kvf-copy")]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_every_block_is_copied_once(threads: int) -> None:
    copies = CopyThreads(threads)
    try:
        for n in range(0, 21):
            seen: list[int] = []
            lock = threading.Lock()

            def copy(lo: int, hi: int, seen: list[int] = seen, lock=lock) -> None:
                with lock:
                    seen.extend(range(lo, hi))

            copies.run(copy, n)
            assert sorted(seen) == list(range(n)), (threads, n)
    finally:
        copies.close()


def test_one_thread_copies_in_the_callers_thread() -> None:
    copies = CopyThreads(1)
    where: list[int] = []
    copies.run(lambda lo, hi: where.append(threading.get_ident()), 16)
    assert where == [threading.get_ident()]
    assert not _helpers_alive()


def test_parts_run_in_parallel_threads() -> None:
    copies = CopyThreads(2)
    try:
        idents: set[int] = set()
        both = threading.Barrier(2, timeout=10)

        def copy(lo: int, hi: int) -> None:
            idents.add(threading.get_ident())
            both.wait()  # only returns once the other part runs at the same time

        copies.run(copy, 16)
        assert len(idents) == 2 and threading.get_ident() in idents
    finally:
        copies.close()


def test_a_helpers_error_is_raised_and_the_callers_part_still_runs() -> None:
    copies = CopyThreads(2)
    done: list[tuple[int, int]] = []
    try:

        def copy(lo: int, hi: int) -> None:
            if lo > 0:
                raise ValueError("helper part failed")
            time.sleep(0.05)
            done.append((lo, hi))

        with pytest.raises(ValueError, match="helper part failed"):
            copies.run(copy, 16)
        assert done == [(0, 8)]
    finally:
        copies.close()


def test_the_callers_error_waits_for_the_helpers() -> None:
    copies = CopyThreads(3)
    done: list[int] = []
    try:

        def copy(lo: int, hi: int) -> None:
            if lo == 0:
                raise ValueError("caller part failed")
            time.sleep(0.05)
            done.append(lo)

        with pytest.raises(ValueError, match="caller part failed"):
            copies.run(copy, 9)
        assert sorted(done) == [3, 6]  # no helper's copy still writes after run returned
    finally:
        copies.close()


def test_close_stops_the_helpers() -> None:
    copies = CopyThreads(3)
    copies.run(lambda lo, hi: None, 12)
    assert _helpers_alive()
    copies.close()
    assert not _helpers_alive()
    copies.close()  # twice is fine
