"""Holding the stop signals across a block that must not be cut: the one way kvfault
does it (the lookup channel's private directories, every command's worktrees)."""

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
