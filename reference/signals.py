"""The stop signals (SIGINT, SIGTERM, SIGHUP): holding them across a block that must not
be cut, the one way kvfault does it (the lookup channel's private directories, every
command's worktrees), and the signal mask, which only this module touches: blocked
from ``kvfault``'s first line until its handlers are in, and across a fork or an exec."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

# The signals that stop a command (it ends with one line and 128 + signum).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Run the block whole: a stop signal that lands in it is held, and sent again to
    this thread once the block ends, to the handler it would have reached then.

    A Python signal handler runs between any two bytecodes of the main thread. Held
    here, its handler is swapped for one that notes it; not with a signal mask, since
    the kernel hands a process's signal to any thread that does not block it (lmcache's,
    pytest-xdist's), and the main thread then runs the handler all the same. Signals
    not handled from Python, or ignored, are left as they are. Outside the main
    thread this holds nothing: handlers run in the main thread, so the block cannot be
    cut there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:
        before = signal.getsignal(signum)
        if before is None or before == signal.SIG_IGN:
            continue  # not set from Python (cannot be restored), or ignored anyway
        previous[signum] = before
        signal.signal(signum, lambda n, _frame: held.append(n))
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
        if held:
            # To this thread, now (os.kill may reach another thread, and the handler
            # would run after the caller has moved on).
            signal.raise_signal(held[0])


def block_stop_signals() -> None:
    """Block the stop signals in this thread, until ``unblock_stop_signals``: a stop that
    comes meanwhile waits, and is taken then by the handlers set in between (``kvfault``'s
    first line, before its imports). Nothing where the platform has no signal mask."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def unblock_stop_signals() -> None:
    """Let the stop signals in again (one that waited is taken now): once this process's
    handlers are in, after ``block_stop_signals`` or a parent's mask it inherited."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block the stop signals with the signal mask for the block, then set the mask back
    (a stop that came meanwhile is taken then). For starting another process: a fork and
    an exec keep the mask, so the new process takes a pending stop once its own handlers
    are in, not in the middle of its start. Not for keeping a block of this process
    whole (another thread may take a signal this one blocks): ``stop_signals_held``."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
