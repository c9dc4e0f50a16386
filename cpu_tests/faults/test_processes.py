"""Stopping a child's process group (faults/processes.py): what the lmcache server's
finalizer and the proof runner rely on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from fresh_python import run_snippet

from kvfault.faults.processes import running, stop_group


def _group_leader() -> subprocess.Popen[bytes]:
    """A child leading its own group that shuts down on SIGTERM as a server does: its
    handler exits 3 (a stopped process leaves a handled signal pending)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_a_stopped_group_still_gets_its_graceful_sigterm():
    """A SIGSTOPped child (a paused server) would hold SIGTERM until the SIGKILL: the
    group is continued first, so its own shutdown runs."""
    proc = _group_leader()
    os.killpg(proc.pid, signal.SIGSTOP)
    stop_group(proc, grace=5.0)
    assert proc.returncode == 3


def test_a_group_already_gone_raises_nothing():
    """Finalizer-safe: stopping twice, or after the child died, is quiet."""
    proc = _group_leader()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    stop_group(proc)
    stop_group(proc)
    assert proc.returncode == -signal.SIGKILL


def test_running_is_false_for_a_zombie_and_for_a_reaped_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)  # fmt: skip
    try:
        assert running(proc.pid) and running(os.getpid())
        proc.stdin.close()  # it exits, and stays a zombie until waited for
        deadline = time.monotonic() + 30
        while running(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(proc.pid)
        assert os.waitpid(proc.pid, os.WNOHANG) != (0, 0)  # it was a zombie, not reaped
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert not running(proc.pid)


def test_stop_descendants_returns_once_the_killed_have_ended():
    # A child that ignores SIGTERM and holds 1 GiB: after its SIGKILL it takes a while to
    # end. What runs next (removing a killed worker's ipc directory, which needs its
    # maker gone) must see it gone; before, the call returned with the child still there.
    from kvfault.faults.processes import stop_descendants

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "b = bytearray(1 << 30); print('ready', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        stop_descendants(grace_s=0.2)
        assert not running(child.pid)
    finally:
        child.kill()
        child.wait(timeout=60)


def test_wait_ended_returns_only_what_still_runs_when_its_bound_passes():
    from kvfault.faults.processes import wait_ended

    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # Returns as soon as all have ended (a zombie counts as ended), whatever the bound.
        assert wait_ended([quick.pid], 60.0) == []
        # At the bound, exactly what still runs.
        assert wait_ended([quick.pid, slow.pid], 0.2) == [slow.pid]
    finally:
        slow.kill()
        slow.wait()
        quick.wait()


# A stop signal whose handler runs inside a weakref callback: Python swallows the
# exception there ("Exception ignored in ..."). The stop must still end the process,
# through its finally blocks, with nothing on stderr.
_SWALLOWED = """
import os, signal, sys, time, weakref
{install}
class Box: pass
box = Box()
weakref.finalize(box, lambda: os.kill(os.getpid(), signal.{sig}))  # the handler runs here
try:
    del box
    print("callback done", flush=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # ordinary code: where the stop must land
        time.sleep(0.01)
    print("never stopped", flush=True)
finally:
    print("unwound", flush=True)
"""


def _swallowed(install: str, sig: str) -> subprocess.CompletedProcess[str]:
    code = _SWALLOWED.format(install=install, sig=sig)
    return run_snippet(code, timeout_s=60)


# The stop's two installs: a forked pool worker's (SIGTERM unwinds it) and a command's
# (each stop signal is its one line).
_WORKER = "from kvfault.faults.campaign.pool import stop_on_sigterm\nstop_on_sigterm()\n"
_COMMAND = (
    "from kvfault.faults.processes import Interrupted, Signals\n"
    "Signals().install()\n"
    "sys.excepthook = lambda t, e, tb: (print(f'Interrupted {e.signum}', file=sys.stderr),"
    " sys.exit(128 + e.signum)) if isinstance(e, Interrupted) else sys.__excepthook__(t, e, tb)\n"
)
_STOPS = [(_WORKER, "SIGTERM")] + [(_COMMAND, s) for s in ("SIGINT", "SIGTERM", "SIGHUP")]
_IDS = ["worker-SIGTERM", "command-SIGINT", "command-SIGTERM", "command-SIGHUP"]


def _stopped_once(
    done: subprocess.CompletedProcess[str], install: str, sig: str, after: str = ""
) -> None:
    signum = getattr(signal, sig)
    # Where the stop lands once sent again is ordinary code, anywhere after the callback
    # (between a print's text and its newline too).
    out = done.stdout.removeprefix(after)
    assert out.startswith("callback done") and out.endswith("unwound\n"), out + done.stderr
    assert "never stopped" not in out, out + done.stderr
    said = "" if install == _WORKER else f"Interrupted {signum}\n"
    assert (done.returncode, done.stderr) == (128 + signum, said)


@pytest.mark.parametrize(("install", "sig"), _STOPS, ids=_IDS)
def test_a_stop_swallowed_in_a_weakref_callback_still_unwinds_it(install, sig):
    _stopped_once(_swallowed(install, sig), install, sig)


@pytest.mark.parametrize(("install", "sig"), _STOPS, ids=_IDS)
def test_a_stop_sent_again_while_the_hook_is_held_up_still_unwinds_it(install, sig):
    """A loaded machine holding the main thread inside the hook past ``REDELIVER_S``
    (here: a sleep after its thread starts) once got the stop sent again in the hook,
    where it was lost ("never stopped"); it is sent only once the main thread has left
    the hook."""
    held_up = (
        "import threading\n"
        "_start = threading.Thread.start\n"
        "threading.Thread.start = lambda self: (_start(self), time.sleep(0.2))\n"
    )
    _stopped_once(_swallowed(held_up + install, sig), install, sig)


def test_an_unraisable_that_is_no_stop_still_reaches_the_previous_hook():
    install = (
        "from kvfault.faults.processes import StopHandler\n"
        "StopHandler(KeyboardInterrupt).install([signal.SIGTERM])\n"
        "class Noisy:\n"
        "    def __del__(self): raise ValueError('from __del__')\n"
        "Noisy()\n"
        "sys.exit(0)"
    )
    done = _swallowed(install, "SIGTERM")
    assert done.returncode == 0 and "ValueError: from __del__" in done.stderr


@pytest.mark.parametrize(("install", "sig"), _STOPS, ids=_IDS)
def test_a_second_outside_stop_while_the_swallowed_one_is_in_the_hook_is_not_lost(install, sig):
    """The hook takes the swallowed stop; a second stop from outside lands while the main
    thread is still in it (injected: the hook's thread start sends it and waits). Once
    re-armed in the hook, that second one raised there, was lost with the first, and the
    process ran on ("never stopped"). Now it is dropped (the handler is re-armed only by
    the sender, once the main thread has left the hook), and were it armed it would be
    sent again rather than raised in the hook: the stop unwinds the process once."""
    outside = (
        "import threading\n"
        "_start = threading.Thread.start\n"
        "def start(self):\n"
        "    _start(self)\n"
        "    threading.Thread.start = _start  # this once\n"
        f"    os.kill(os.getpid(), signal.{sig})\n"
        "    time.sleep(0.2)\n"
        "threading.Thread.start = start\n"
    )
    _stopped_once(_swallowed(install + outside, sig), install, sig)


@pytest.mark.parametrize(("install", "sig"), _STOPS, ids=_IDS)
def test_a_stop_that_comes_while_another_unraisable_is_reported_is_not_lost(install, sig):
    """A ``__del__``'s error is being reported (the hook below, held up) when the stop
    comes: raised there it would only be printed ("Exception ignored in
    sys.unraisablehook") and lost; it is sent again once the report is done."""
    code = (
        "import os, signal, sys, time\n"
        "def report(unraisable):\n"
        f"    os.kill(os.getpid(), signal.{sig})\n"
        "    time.sleep(0.2)\n"
        "    print('reported', type(unraisable.exc_value).__name__, flush=True)\n"
        "sys.unraisablehook = report\n" + install + "class Noisy:\n"
        "    def __del__(self): raise ValueError('from __del__')\n"
        "try:\n"
        "    Noisy()\n"
        "    print('callback done', flush=True)\n"
        "    deadline = time.monotonic() + 20\n"
        "    while time.monotonic() < deadline:\n"
        "        time.sleep(0.01)\n"
        "    print('never stopped', flush=True)\n"
        "finally:\n"
        "    print('unwound', flush=True)\n"
    )
    done = run_snippet(code, timeout_s=60)
    assert done.stdout.startswith("reported ValueError\n"), done.stdout + done.stderr
    _stopped_once(done, install, sig, after="reported ValueError\n")


def test_a_signal_inside_deferred_is_raised_when_the_block_ends_and_a_second_is_not():
    """``Signals.deferred`` (prove's worktrees): the block runs to its end, then the
    held signal raises ``Interrupted``; while that one's cleanup runs (deferred again),
    another signal is not raised into it."""
    from kvfault.faults.processes import Interrupted, Signals

    signals = Signals()
    signals.install()
    steps = []
    try:
        with pytest.raises(Interrupted) as first:
            with signals.deferred():
                signal.raise_signal(signal.SIGTERM)
                steps.append("block ran on")
        with signals.deferred():  # the cleanup
            signal.raise_signal(signal.SIGHUP)
            steps.append("cleanup ran on")
    finally:
        signals.restore()
    assert first.value.signum == signal.SIGTERM
    assert steps == ["block ran on", "cleanup ran on"]


@pytest.mark.parametrize("module", ["kvfault.faults.entry", "kvfault.faults.processes"])
def test_the_command_can_install_its_handlers_before_importing_the_stack(module):
    """``kvfault`` blocks the stop signals and installs ``Signals`` first (a signal
    during its imports is one line): its entry and ``kvfault.faults.processes`` import the
    stdlib and no module of kvfault's but the two stdlib-only ones they name."""
    code = (
        f"import sys, {module}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kvfault'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout  # fmt: skip
    expected = ["kvfault", "kvfault.faults", "kvfault.reference", "kvfault.reference._lazy",
                "kvfault.reference.signals"]  # fmt: skip
    if module == "kvfault.faults.processes":
        expected += ["kvfault.faults.processes", "kvfault.reference.pids"]
    else:
        expected += ["kvfault.faults.entry"]
    assert out == f"{sorted(expected)}\n", out
