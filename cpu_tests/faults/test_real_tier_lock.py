"""One real-tier campaign at a time per host: a second waits, after one line saying so
(issue 12, item 3). Real processes and a real ``flock``; no lmcache needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kvfault.faults.lmcache.server import RealTierLock

ROOT = Path(__file__).resolve().parents[2]

HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kvfault.faults.lmcache.server import RealTierLock
    lock = RealTierLock(path=Path(sys.argv[1])).acquire()
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)
WAIT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from kvfault.faults.lmcache.server import RealTierLock
    t0 = time.monotonic()
    with RealTierLock(path=Path(sys.argv[1])):
        print(f"got it after {time.monotonic() - t0:.1f}s", flush=True)
    """
)


def _py(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_campaign_waits_with_one_line_then_runs(tmp_path):
    lock = tmp_path / "lmcache-tier.lock"
    holder = _py(HOLD, str(lock), "2")
    assert holder.stdout.readline().strip() == "held"
    waiter = _py(WAIT, str(lock))
    out, err = waiter.communicate(timeout=60)
    holder.wait(timeout=30)
    assert waiter.returncode == 0, err
    assert err.splitlines() == [
        f"kvfault: another real-tier campaign (pid {holder.pid}) is running on this host; "
        "waiting for it to finish (real-time deadlines do not survive sharing the cores)"
    ]
    assert out.startswith("got it after")
    assert float(out.split()[3].rstrip("s")) >= 0.5  # it did wait for the holder


def test_a_killed_holder_releases_the_lock(tmp_path):
    """The kernel drops a flock with its process: a SIGKILLed campaign blocks no one."""
    lock = tmp_path / "lmcache-tier.lock"
    holder = _py(HOLD, str(lock), "600")
    assert holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    t0 = time.monotonic()
    with RealTierLock(path=lock, note=lambda line: (_ for _ in ()).throw(AssertionError(line))):
        pass
    assert time.monotonic() - t0 < 30


def test_no_line_when_nobody_holds_it(tmp_path):
    lines: list[str] = []
    with RealTierLock(lines.append, path=tmp_path / "l"):
        assert (tmp_path / "l").read_text().strip() == str(os.getpid())
    assert lines == []


def test_the_default_lock_is_per_user_and_private():
    lock = RealTierLock()
    assert lock.path.parent.name == f"kvfault-{os.getuid()}"
    assert (lock.path.parent.stat().st_mode & 0o777) == 0o700
