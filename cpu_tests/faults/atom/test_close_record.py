"""A server's close keeps the ATOM lines each worker recorded however that worker's
close ends (``processes._close_workers``): a worker that dies in its close leaves what
it recorded before it, and the other workers are still closed."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

from kvfault.faults.atom.event_log import EventLog
from kvfault.faults.atom.processes import _close_workers
from kvfault.faults.atom.scheduler import WorkerLink, WorkerRanks


def _worker(conn, lines: list, dies_in_close: bool) -> None:
    """Answers ``recorded`` with ``lines``; ``close`` with them and one more line,
    or, dying, by closing its end with no reply."""
    while True:
        name, _args = conn.recv()
        if name == "close" and dies_in_close:
            conn.close()
            return
        if name == "close":
            conn.send((True, lines + [["atom/x.py", "closing", 1, 1]], []))
            conn.close()
            return
        conn.send((True, lines, []))


def test_a_worker_that_dies_in_its_close_leaves_its_lines_and_the_next_is_closed():
    ends, threads = [], []
    for rank, dies in ((0, True), (1, False)):
        mine, theirs = Pipe()
        lines = [[f"atom/rank{rank}.py", "load", 3, 2]]
        t = threading.Thread(target=_worker, args=(theirs, lines, dies), daemon=True)
        t.start()
        ends.append(WorkerLink(mine, EventLog(), timeout_s=10.0))
        threads.append(t)
    executed = _close_workers(WorkerRanks(ends), recorded=True)
    for t in threads:
        t.join(10.0)
    assert executed == [
        ["atom/rank0.py", "load", 3, 2],  # asked before its close, which never replied
        ["atom/rank1.py", "load", 3, 2],
        ["atom/x.py", "closing", 1, 1],  # the clean close's reply: its lines up to exit
    ]
    assert not any(t.is_alive() for t in threads)
