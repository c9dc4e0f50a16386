"""The ``kvfault`` program's first lines (its console script).

The stop signals are blocked before anything of kvfault is imported, and
``kvfault.faults.cli.main`` unblocks them once its handlers are in: a SIGINT, SIGTERM or SIGHUP
that comes while the command starts waits for them, so it too ends the command with
one line and 128 + signum, not a traceback from the middle of an import.
"""

from __future__ import annotations

# The stdlib and nothing else: importing the reference package's ``__init__`` imports
# none of its modules.
from kvfault.reference.signals import block_stop_signals


def main() -> int:
    """Hold the stop signals, then run ``kvfault.faults.cli.main`` (which releases them)."""
    block_stop_signals()
    from kvfault.faults.cli import main as command_line
    from kvfault.faults.processes import adopt_orphans

    adopt_orphans()  # the command's own process: what it starts stays below it
    return command_line(program=True)
