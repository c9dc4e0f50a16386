"""The hang guard (faults/campaign/hang_guard.py): once it has fired, the guarded code
does not go on, even if its block ends while the guard is still reporting (a case that
finished just past its bound must not let the campaign stage and start the next)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# The guard fires; its report (last_words) is still running when the block ends.
SCRIPT = textwrap.dedent(
    """
    import threading, time
    from kvfault.faults.campaign.hang_guard import arm_hang_guard, disarm_hang_guard

    reporting = threading.Event()

    def last_words():
        reporting.set()
        time.sleep(1.0)  # the report takes a while; the block ends meanwhile
        print("reported", flush=True)

    arm_hang_guard(0.05, last_words)
    assert reporting.wait(60)
    disarm_hang_guard()  # the block ends just past its bound
    print("went on to the next case", flush=True)
    """
)


def test_a_guard_that_fired_ends_the_process_even_if_the_block_ends_meanwhile():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "reported\n"
    assert proc.stderr.startswith("kvfault: error: timed out: a case ran past --timeout 0.05s")


def test_a_guard_disarmed_in_time_never_fires():
    script = (
        "from kvfault.faults.campaign.hang_guard import arm_hang_guard, disarm_hang_guard\n"
        "arm_hang_guard(60.0, lambda: print('fired'))\n"
        "disarm_hang_guard()\n"
        "print('went on')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "went on\n", "")
