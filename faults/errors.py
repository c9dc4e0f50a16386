"""The one base of the errors kvfault raises, and the exit code each one maps to.

Every error class in ``faults/`` derives from ``KvfaultError``, so the ``kvfault``
command turns any of them into one line on stderr and its ``exit_code`` in one place
(``kvfault.faults.cli.main``, through ``report``, the one function that writes
``kvfault: error: ``). Each subclass keeps the builtin base it had (``ValueError``,
``RuntimeError``, ``OSError``), so callers that catch those still do.

Not here: the stack's own errors (``kvfault.reference.errors``: a run records them as
evidence; ``reference`` imports nothing of ``faults``), the simulated engine crash an
injector raises inside a run (``kvfault.faults.injectors.engine.EngineCrash``) and the signal
that interrupts a command (``kvfault.faults.processes.Interrupted``, a ``KeyboardInterrupt``:
its exit code is 128 plus the signal's number).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import ClassVar, TextIO

# Bad arguments, a setup that failed, a run that proved nothing: the exit code the
# verdicts give 2 for too (faults.verdicts). 0 and 1 belong to verdicts alone.
USAGE_EXIT = 2


class KvfaultError(Exception):
    """An error kvfault raises on purpose. ``line()`` is the one line the command prints
    after ``kvfault: error: ``; ``exit_code`` is the status it then exits with."""

    exit_code: ClassVar[int] = USAGE_EXIT

    def line(self) -> str:
        return str(self)


class UsageError(KvfaultError, ValueError):
    """Bad input on the command line, said in one line (exit 2)."""


class KvfaultOSError(KvfaultError, OSError):
    """An ``OSError`` of kvfault's own (``OSError(errno, strerror, filename)``): its
    line names the file, if any, and the reason, as the command says any ``OSError``."""

    def line(self) -> str:
        where = f"{self.filename}: " if self.filename else ""
        return f"{where}{self.strerror or super().line()}"


def report(error: KvfaultError, stream: TextIO | None = None) -> int:
    """Say ``error`` as kvfault says every error of its own: one line, ``kvfault: error:``
    and its ``line()``, on ``stream`` (stderr by default; nothing when the stream cannot
    take it: closed or full). Returns its ``exit_code``. ``kvfault``'s main calls it for
    every ``KvfaultError`` raised through it; the places that cannot raise to main call
    it themselves: the hang guard's thread, which ends the process, and the reports
    written while a stop signal or a hang ends the run."""
    out = sys.stderr if stream is None else stream
    with unwritable_dropped(out):
        print(f"kvfault: error: {error.line()}", file=out, flush=True)
    return error.exit_code


@contextlib.contextmanager
def unwritable_dropped(stream: TextIO) -> Iterator[None]:
    """For a block that writes to ``stream``: when the stream cannot take it (closed,
    or full: ``2>/dev/full``), the error is swallowed, what the stream's buffer still
    holds is dropped and its descriptor pointed at ``/dev/null``. A buffered stderr's
    held bytes would otherwise fail the interpreter's last flush too, and the exit code
    would become 120."""
    try:
        yield
    except (OSError, ValueError, AttributeError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, stream.fileno())
            finally:
                os.close(null)
            stream.flush()  # the held bytes go to /dev/null
