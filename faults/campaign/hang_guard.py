"""The hang guard: a case that runs past ``--timeout`` prints one line and every
thread's stack to stderr and ends the process with exit 2 (an ERROR), instead of
blocking CI. Its replay artifact is on disk already."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

from kvfault.faults.errors import KvfaultError, report


def _stderr_fd() -> Any:
    # faulthandler writes to a file descriptor; under pytest's capture sys.stderr has none.
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


# A case that runs past --timeout is an ERROR: exit 2, like any other error.
TIMEOUT_EXIT = 2
# faulthandler's own watchdog (a C thread) backs the Python one up this much later,
# for a hang that never lets a Python thread run; it exits 1.
_BACKSTOP_S = 60.0


class _Guard:
    """One armed guard. Firing and disarming exclude each other: once it has fired, a
    block that ends (a case that finished just past its bound) does not go on to the
    next case while the process is on its way out; it waits for the exit."""

    def __init__(self, timeout_s: float, last_words: Callable[[], object] | None):
        self.timeout_s, self.last_words = timeout_s, last_words
        self.lock = threading.Lock()
        self.fired = self.disarmed = False
        self.timer = threading.Timer(timeout_s, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        with self.lock:
            if self.disarmed:  # disarmed after the timer's wait ended: not a timeout
                return
            self.fired = True
        _timed_out(self.timeout_s, self.last_words)

    def disarm(self) -> None:
        self.timer.cancel()
        with self.lock:
            self.disarmed = True
            fired = self.fired
        if fired:
            # The guard thread reports this timeout and ends the process (os._exit);
            # should its report itself hang, the backstop's bound ends it here.
            time.sleep(_BACKSTOP_S)
            os._exit(TIMEOUT_EXIT)


_guard: _Guard | None = None


def _timed_out(timeout_s: float, last_words: Callable[[], object] | None) -> None:
    # Said here, not raised: this is the guard's thread, and the process ends below.
    out = _stderr_fd()
    report(
        KvfaultError(
            f"timed out: a case ran past --timeout {timeout_s:g}s; every thread's stack follows"
        ),
        out,
    )
    faulthandler.dump_traceback(file=out, all_threads=True)
    out.flush()
    if last_words is not None:
        try:
            last_words()
        except BaseException as exc:  # noqa: BLE001 - the process ends either way
            report(KvfaultError(f"could not report the timeout: {exc!r}"), out)
    os._exit(TIMEOUT_EXIT)


def arm_hang_guard(timeout_s: float | None, last_words: Callable[[], object] | None = None) -> None:
    """From now on, if ``disarm_hang_guard`` is not called within ``timeout_s``, one
    line and every thread's stack go to stderr, ``last_words()`` runs (on the guard's
    thread: the campaign prints its table and writes its reports), and the process
    exits with 2 (an ERROR) instead of blocking. None or 0: no guard. A guard that has
    fired ends the process even if ``disarm_hang_guard`` comes meanwhile."""
    global _guard
    disarm_hang_guard()
    if timeout_s and timeout_s > 0:
        _guard = _Guard(timeout_s, last_words)
        _guard.timer.start()
        faulthandler.dump_traceback_later(timeout_s + _BACKSTOP_S, exit=True, file=_stderr_fd())


def disarm_hang_guard() -> None:
    global _guard
    if _guard is not None:
        guard, _guard = _guard, None
        guard.disarm()
    faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def hang_guard(
    timeout_s: float | None, last_words: Callable[[], object] | None = None
) -> Iterator[None]:
    """``arm_hang_guard`` for the duration of a block."""
    arm_hang_guard(timeout_s, last_words)
    try:
        yield
    finally:
        disarm_hang_guard()
