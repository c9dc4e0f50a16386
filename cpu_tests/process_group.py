"""A command under test in a process group of its own, as a shell runs a foreground
job: wait (bounded) until it is ready to be interrupted, then signal its whole group
as a terminal's Ctrl-C does; whatever is left is killed however the test ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator


def wait_until(
    ready: Callable[[], object], proc: subprocess.Popen[str], timeout_s: float, never: str
) -> None:
    """Poll ``ready`` until it is true. Fails the test with the command's output when
    the command ends first, and with ``never`` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, never
        time.sleep(0.02)


@contextlib.contextmanager
def group_killed_at_exit(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc`` (started with ``start_new_session=True``) for the block; its whole
    process group is SIGKILLed, and it is reaped, if it still runs when the block ends."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
