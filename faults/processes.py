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
from typing import Any, Callable, Iterable, TypeAlias

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


class StopHandler:
    """A stop signal's handler that raises ``exception(signum)`` in the main thread, once:
    a later stop is dropped, so none cuts into the first one's cleanup or replaces it.

    A signal handler runs between any two bytecodes of the main thread, and that can be
    inside a weakref callback, a ``__del__``, a gc callback or ``sys.unraisablehook``
    itself: there Python only reports the exception ("Exception ignored in ...") and
    carries on, and the stop would be lost. So this handler's layer of
    ``sys.unraisablehook`` (``over``) takes its own swallowed stop, reports nothing, and
    has the signal sent again to the main thread once that thread has left the hook,
    re-armed only then, so it raises into ordinary code; a stop that comes while the
    main thread is in the hook is sent again the same way instead of raised there.
    Every other unraisable goes to the hook below. Handlers can only be set from the
    main thread: ``install`` elsewhere does nothing."""

    REDELIVER_S = 0.01  # how often the sender looks whether the main thread has left the hook
    GIVE_UP_S = 30.0  # bound on that wait: then it is sent all the same

    def __init__(self, exception: Callable[[int], BaseException]) -> None:
        self._exception = exception
        self._raised: BaseException | None = None  # the stop raised (None: armed)
        self._signum = 0  # its signal
        self._previous: dict[int, Handler] = {}
        self._layer: _StopLayer | None = None

    @staticmethod
    def of(hook: Callable[[Any], Any]) -> StopHandler | None:
        """The handler whose layer ``hook`` is (``sys.unraisablehook`` before another
        hook goes over it), or None."""
        return hook.stop if isinstance(hook, _StopLayer) else None

    def install(self, signums: Iterable[int]) -> None:
        """Handle ``signums``, and put this handler's layer over ``sys.unraisablehook``."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in signums:
            self._previous[signum] = signal.signal(signum, self.handle)
        if self._layer is None:
            self._layer = _StopLayer(self, sys.unraisablehook)
            sys.unraisablehook = self._layer

    def uninstall(self, handler: Callable[[Handler], Handler] = lambda previous: previous) -> None:
        """Put back what ``install`` replaced: each signal's handler (or ``handler(it)``)
        and the unraisable hook, if nothing was put over this one's layer since."""
        for signum, previous in self._previous.items():
            signal.signal(signum, handler(previous))
        self._previous.clear()
        if self._layer is not None and sys.unraisablehook is self._layer:
            sys.unraisablehook = self._layer.below
        self._layer = None

    def over(self, below: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """A layer of ``sys.unraisablehook`` that takes this handler's swallowed stop and
        hands every other unraisable to ``below``: to put over a hook that another
        installed over this one's (pytest's own, for a session), so a stop swallowed
        meanwhile still reaches this handler."""
        return _StopLayer(self, below)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (``signal.signal(signum, stop.handle)``)."""
        if self._raised is not None:
            return
        self._raised, self._signum = self._exception(signum), signum
        if _in_hook(frame):  # raised here it would only be printed ("... in sys.unraisablehook")
            self._send_again()
            return
        raise self._raised

    def _take(self, unraisable: Any, below: Callable[[Any], Any]) -> None:
        exc = unraisable.exc_value
        if exc is None or exc is not self._raised or not self._previous:
            below(unraisable)
        else:
            self._send_again()

    def _send_again(self) -> None:
        main = threading.main_thread().ident
        assert main is not None
        threading.Thread(target=self._resend, args=(main, self._signum), daemon=True).start()

    def _resend(self, main: int, signum: int) -> None:
        # Not from the hook (the handler would run in it, and be swallowed again), nor on
        # a timer alone (a main thread held up in the hook past it, on a loaded machine,
        # got it there all the same): once the main thread's stack holds no hook. Re-armed
        # from here, only then: re-armed in the hook, a second outside stop that came
        # before the hook returned raised in it and was lost.
        deadline = time.monotonic() + self.GIVE_UP_S
        while time.monotonic() < deadline:
            time.sleep(self.REDELIVER_S)
            frame = sys._current_frames().get(main)
            if frame is None:
                return  # the main thread has ended
            if not _in_hook(frame):
                break
        self._raised = None
        with contextlib.suppress(OSError, ValueError):  # the process is on its way out
            signal.pthread_kill(main, signum)


class _StopLayer:
    """One layer of ``sys.unraisablehook``: a ``StopHandler``'s, over ``below``."""

    def __init__(self, stop: StopHandler, below: Callable[[Any], Any]) -> None:
        self.stop = stop
        self.below = below

    def __call__(self, unraisable: Any) -> None:
        self.stop._take(unraisable, self.below)


_HOOK_CODE = _StopLayer.__call__.__code__


def _in_hook(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``StopHandler``'s layer of the unraisable hook
    (or in what it calls: the hook below)."""
    while frame is not None:
        if frame.f_code is _HOOK_CODE:
            return True
        frame = frame.f_back
    return False


class Signals:
    """SIGINT/SIGTERM/SIGHUP become `Interrupted`, but only where we can afford it.

    Inside `deferred()` (creating and removing worktrees) a signal is held and raised
    when the block ends (``kvfault.reference.signals.stop_signals_held``), so a Ctrl-C cannot
    leave a half-created, locked worktree behind. Once: after the first `Interrupted`,
    further signals are dropped, so none cuts into the first one's cleanup or replaces
    its exit status; one that Python swallows is sent again (``StopHandler``). Handlers
    can only be set from the main thread; elsewhere this does nothing and the caller's
    own handling applies.
    """

    def __init__(self) -> None:
        self._stop = StopHandler(Interrupted)

    def install(self) -> None:
        self._stop.install(STOP_SIGNALS)

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        self._stop.uninstall()

    def ignore_from_now(self) -> None:
        """The command has ended and its process is on its way out: a stop signal
        from now on is ignored, so the exit status stands (Python's own handlers, and
        the defaults it restores as it shuts down, would end it by the signal)."""
        self._stop.uninstall(lambda _previous: signal.SIG_IGN)

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
