"""Standard streams that are closed or cannot be written (``>&-``, ``2>&-``,
``>/dev/full``): a command still ends in one line where one can be written and with the
right exit code, never a traceback.

``guard_streams`` runs for the length of a command: a closed descriptor 0, 1 or 2 is
first reopened on ``/dev/null`` (so no file this process opens takes its number and
gets our output, nor a child's); a write to stdout that fails raises ``OSError`` naming
``stdout`` (one line, exit 2); a write to stderr that fails is dropped (there is nowhere
to say so), and the command's exit code stands. Stdlib only.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from kvfault.faults.errors import KvfaultOSError


class StreamClosed(KvfaultOSError):
    """stdout was closed when the command started: nothing it prints could be read."""


def _reopen_closed(fd: int) -> bool:
    """Put ``/dev/null`` on ``fd`` if it is closed; True when it was."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)  # inheritable, as dup2 makes it
        os.close(null)
    else:  # os.open's descriptors are not inherited: a child would find fd closed
        os.set_inheritable(fd, True)
    return True


class _Guarded(io.TextIOBase):
    """``inner`` with failed writes turned into one ``OSError`` naming the stream
    (``swallow``: into nothing). After the first failure the descriptor is pointed at
    ``/dev/null``, so the interpreter's last flush cannot fail again."""

    def __init__(self, inner: TextIO, name: str, swallow: bool):
        self.inner = inner
        self.name = name
        self.swallow = swallow
        self.broken = False
        self.failure: OSError | None = None  # what the first failed write raised, if it did

    def _failed(self, exc: OSError) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.inner.fileno())
            os.close(null)
        if isinstance(exc, BrokenPipeError) and not self.swallow:
            self.failure = exc
            raise exc  # the reader went away: the caller's SIGPIPE convention applies
        if not self.swallow:
            self.failure = OSError(exc.errno, f"cannot write to {self.name}: {exc.strerror}")
            raise self.failure from None

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            return self.inner.write(text)
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def flush(self) -> None:
        if self.broken:
            with contextlib.suppress(OSError, ValueError):
                self.inner.flush()  # now into /dev/null: empties the buffer
            return
        try:
            self.inner.flush()
        except OSError as exc:
            self._failed(exc)
            with contextlib.suppress(OSError, ValueError):
                self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]  # a plain attribute in TextIOBase
        return getattr(self.inner, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]  # a plain attribute in TextIOBase
        return getattr(self.inner, "errors", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.contextmanager
def guard_streams() -> Iterator[None]:
    """For the block: closed descriptors 0-2 reopened on ``/dev/null``; writes to
    stdout that fail raise ``OSError`` (``cannot write to stdout: ...``), writes to
    stderr that fail are dropped. Raises ``StreamClosed`` at once when stdout was
    closed (what the command prints could not go anywhere), after saying so on stderr
    if that is open."""
    closed = [_reopen_closed(fd) for fd in (0, 1, 2)]
    if closed[2] or sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    if sys.__stderr__ is None:
        # Started with fd 2 closed: pytest (the -n/--tx backends, sweep) asserts on it.
        sys.__stderr__ = sys.stderr  # type: ignore[misc,assignment]  # Final in typeshed: None here
    out, err = sys.stdout, sys.stderr
    if closed[1] or out is None:
        raise StreamClosed(9, "stdout is closed: what kvfault prints could not be read")
    guarded = _Guarded(sys.stdout, "stdout", swallow=False)
    sys.stdout = guarded
    sys.stderr = _Guarded(sys.stderr, "stderr", swallow=True)
    try:
        yield
    finally:
        sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        sys.stdout, sys.stderr = out, err
        # A failed write that someone swallowed (argparse's help does) still fails the
        # command; one on its way out already, or a stop, is left to go on as it is.
        going = sys.exc_info()[1]
        if guarded.failure is not None and (going is None or isinstance(going, SystemExit)):
            raise guarded.failure
