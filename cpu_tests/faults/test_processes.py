"""Stopping a child's process group (faults/processes.py): what the lmcache server's
finalizer and the proof runner rely on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from faults.processes import running, stop_group


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
    from faults.processes import stop_descendants

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
    from faults.processes import wait_ended

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
