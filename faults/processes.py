"""Processes and signals, the one way every kvfault command handles them: SIGINT,
SIGTERM and SIGHUP become ``Interrupted`` (deferred where a block must not be cut), a child that
leads its own process group is stopped with everything in it, and after Ctrl-C
whatever this process started is stopped, so no process outlives its command."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, TypeAlias

# Cheap at import (the stdlib and two stdlib-only modules of ``reference``, not the
# stack): a command installs its handlers (``Signals``) before it imports anything else,
# so that a signal in its first milliseconds also ends it with one line.
from kvfault.reference.pids import running as running
from kvfault.reference.signals import STOP_SIGNALS as STOP_SIGNALS  # the signals ending a command
from kvfault.reference.signals import stop_signals_held

# What signal.signal takes and returns: a function, SIG_DFL or SIG_IGN, or None (a
# handler not installed from Python).
Handler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived (``signum`` says which).

    A KeyboardInterrupt, so code that already handles Ctrl-C handles SIGTERM the same
    way, and no ``except Exception`` swallows it. Raised after the worktrees are gone.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class SwallowedStops:
    """Keeps a stop signal's exception from being lost where Python swallows it.

    A signal handler raises wherever the main thread happens to be, and that can be a
    weakref callback, a ``__del__`` or a gc callback: there Python prints "Exception
    ignored in ..." and carries on, so the stop would be lost. While installed (as
    ``sys.unraisablehook``) this asks ``again(exc)`` for each swallowed exception; for
    a stop it re-arms its handler and returns the signal, which is then sent again to
    the main thread ``REDELIVER_S`` after this hook has returned (however long that
    takes), so the handler raises into ordinary code. Nothing is printed for it. Every other
    exception goes to the hook that was installed before."""

    REDELIVER_S = 0.01

    def __init__(self, again: Callable[[BaseException], int | None]) -> None:
        self._again = again
        self._previous: Callable[[Any], Any] | None = None

    def install(self) -> None:
        if self._previous is None:
            self._previous = sys.unraisablehook
            sys.unraisablehook = self._hook

    def restore(self) -> None:
        if self._previous is not None and sys.unraisablehook == self._hook:
            sys.unraisablehook = self._previous
        self._previous = None

    def _hook(self, unraisable: Any) -> None:
        exc = unraisable.exc_value
        signum = self._again(exc) if exc is not None else None
        if signum is None:
            (self._previous or sys.__unraisablehook__)(unraisable)
            return
        main = threading.main_thread().ident
        assert main is not None
        # Not from here: the handler would run inside this hook, and be swallowed again
        # (a raise out of an unraisablehook is only printed). Nor on a timer alone: a
        # main thread held up in here longer than REDELIVER_S (a loaded machine) got
        # it here all the same. The sender waits for the gate, opened as this hook's
        # last call; what follows it checks for no signal until ordinary code runs.
        gate = threading.Lock()
        gate.acquire()
        threading.Thread(
            target=_signal_soon, args=(main, signum, self.REDELIVER_S, gate), daemon=True
        ).start()
        gate.release()


def _signal_soon(thread_id: int, signum: int, after_s: float, gate: threading.Lock) -> None:
    gate.acquire()  # the hook has returned (or is returning) by then
    time.sleep(after_s)
    with contextlib.suppress(OSError, ValueError):  # the process is on its way out
        signal.pthread_kill(thread_id, signum)


class Signals:
    """SIGINT/SIGTERM/SIGHUP become `Interrupted`, but only where we can afford it.

    Inside `deferred()` (creating and removing worktrees) a signal is held and raised
    when the block ends (``kvfault.reference.signals.stop_signals_held``), so a Ctrl-C cannot
    leave a half-created, locked worktree behind. Once: after the first `Interrupted`,
    further signals are dropped, so none cuts into the first one's cleanup or replaces
    its exit status. Handlers can only be set from the main thread; elsewhere this does
    nothing and the caller's own handling applies.
    """

    def __init__(self) -> None:
        self._previous: dict[int, Handler] = {}
        self._stopping = False
        self._swallowed = SwallowedStops(self._again)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._swallowed.install()

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        self._uninstall(lambda previous: previous)

    def ignore_from_now(self) -> None:
        """The command has ended and its process is on its way out: a stop signal
        from now on is ignored, so the exit status stands (Python's own handlers, and
        the defaults it restores as it shuts down, would end it by the signal)."""
        self._uninstall(lambda _previous: signal.SIG_IGN)

    def _uninstall(self, handler: Callable[[Handler], Handler]) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, handler(previous))
        self._previous.clear()
        self._swallowed.restore()

    def _handle(self, signum: int, _frame: object) -> None:
        if self._stopping:
            return
        self._stopping = True
        raise Interrupted(signum)

    def _again(self, exc: BaseException) -> int | None:
        if not isinstance(exc, Interrupted) or not self._previous:
            return None
        self._stopping = False  # that one never reached anyone
        return exc.signum

    def deferred(self) -> contextlib.AbstractContextManager[None]:
        """A block a stop signal must not cut: the signal is raised when it ends."""
        return stop_signals_held()


def kill_group(proc: subprocess.Popen[Any], grace: float = 2.0, reap_s: float = 30.0) -> None:
    """Stop CMD and everything it started (it leads its own process group): SIGCONT
    (a stopped process holds a SIGTERM it handles until continued), SIGTERM, and SIGKILL
    once ``grace`` seconds pass. Safe in a finalizer: a group already gone raises nothing, and it
    waits at most ``grace + reap_s`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGCONT)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, reap_s)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def stop_group(proc: subprocess.Popen[Any], grace: float = 2.0) -> None:
    """Stop a child that leads its own process group, and everything in that group:
    SIGTERM, then SIGKILL for whatever is left once the leader is gone (its workers).
    As finalizer-safe as ``kill_group``."""
    kill_group(proc, grace)
    reap_group(proc.pid)


def communicate_or_stop(
    proc: subprocess.Popen[Any], timeout: float | None = None
) -> tuple[Any, Any]:
    """``proc.communicate(timeout=...)`` for a child that leads its own process group
    (``start_new_session=True``). On anything that ends the wait early -- Ctrl-C
    (``KeyboardInterrupt``, ``Interrupted``), a timeout -- the whole group (pytest,
    its xdist workers, their children) is stopped before the exception goes on, so
    nothing outlives the command that started it."""
    try:
        return proc.communicate(timeout=timeout)
    except BaseException:
        stop_group(proc)
        raise


def reap_group(pgid: int) -> None:
    # CMD has exited; kill what it left running in its group (servers, sleepers) so no
    # orphan outlives the worktree it runs in.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (Linux: from /proc; elsewhere none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def adopt_orphans() -> bool:
    """Make this process the one that orphaned descendants are handed to (Linux's
    child subreaper), instead of init: a process whose parent died first (an inner
    pytest-xdist worker whose pytest a stop killed) stays below this process, where
    ``stop_descendants`` finds it. Whether it took (not on other systems). For a
    command's own process, not a library caller's: it changes who reaps orphans."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def stop_descendants(
    grace_s: float = 5.0, reap_s: float = 10.0, *, since: set[int] | None = None
) -> None:
    """After Ctrl-C: stop whatever this process started that is still running (pytest-xdist
    workers of ``-n``/``-j``/``--tx`` and what they run), SIGTERM then, after ``grace_s``,
    SIGKILL, and wait up to ``reap_s`` for the killed to end, so no process outlives the
    command (children in their own group were stopped already). ``since``: only the
    processes that were not below this one then (what a command that has ended left
    running: daemons it detached, adopted here by ``adopt_orphans``); only those are
    reaped."""

    def below() -> list[int]:
        now = descendants(os.getpid())
        return now if since is None else [p for p in now if p not in since]

    procs = below()
    if not procs:
        return
    for pid in procs:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    wait_ended(procs, grace_s)
    # Until none is left: a dying parent may still start one (pytest-xdist replaces a
    # worker that died), and what it leaves is adopted here (``adopt_orphans``).
    deadline = time.monotonic() + reap_s
    killed: list[int] = []
    while time.monotonic() < deadline:
        alive = [pid for pid in below() + procs if running(pid)]
        if not alive:
            break
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += alive
        # SIGKILL lands asynchronously: wait (bounded) until each has ended, so that what
        # runs next (removing the ipc directories of workers that could not) sees them gone.
        wait_ended(alive, max(0.0, deadline - time.monotonic()))
    # Two ways to reap, on purpose. Without ``since`` the command is ending and nothing of
    # ours waits on a child: reap every child, also zombies adopted after the listing.
    # With it the command goes on, and waitpid(-1) could take the exit status of a child
    # a ``subprocess.Popen`` still waits for: reap only what was stopped here.
    if since is None:
        _reap_children(deadline)
    else:
        for pid in set(procs + killed):  # those that are ours now (adopted): no zombie
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)


def _reap_children(deadline: float) -> None:
    """Reap every child of this process that has ended, adopted orphans included,
    until none is left below it or ``deadline`` (a zombie left to an init that reaps
    lazily would keep the command's process group alive after it)."""
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no child at all
        if pid == 0:
            if not descendants(os.getpid()):
                return
            time.sleep(0.01)


def wait_ended(pids: list[int], within_s: float, poll_s: float = 0.01) -> list[int]:
    """Wait up to ``within_s`` seconds for every process of ``pids`` to end; return
    those still running then."""
    deadline = time.monotonic() + within_s
    left = [p for p in pids if running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = [p for p in left if running(p)]
    return left
