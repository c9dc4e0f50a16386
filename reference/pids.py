"""Whether a process runs: the one check every part of kvfault uses (the lookup
channel's stale-socket test, the commands' process cleanup)."""

from __future__ import annotations

import os


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (one whose parent has yet to
    reap it is gone for every purpose here). Another user's process counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        # No /proc (macOS): the signal check above is all there is. With /proc, the
        # process ended between the two checks.
        return not os.path.isdir("/proc/self")
    except (OSError, IndexError):
        return False
