"""Files kvfault reads and writes on a user's disk, the one way every writer does it.

``read_bounded`` reads at most a limit from a regular file and never blocks: a FIFO, a
device (``/dev/zero``), a directory or a socket is refused in one line, whatever link
leads to it. ``write_atomic`` makes a file appear whole or not at all, through a
private temporary file with a unique name in the target directory (``O_EXCL``: never a
planted file or link), renamed over the target; the target itself, if it is a link, is
replaced, never written through. On any failure the temporary file is gone and the
``OSError`` names the target. ``locked_dir`` serialises read-modify-write sequences of
several processes on one directory. Stdlib only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kvfault.faults.errors import KvfaultOSError


class NotARegularFile(KvfaultOSError):
    """The path names something that is not a regular file (a FIFO, a device, a
    directory, a socket): reading it could block or never end."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path: str | os.PathLike[str], limit: int, follow: bool = True) -> bytes:
    """At most ``limit + 1`` bytes of the regular file at ``path`` (a caller that gets
    more than ``limit`` knows the file is too big without reading the rest).

    Opens with ``O_NONBLOCK`` (a FIFO does not block the open) and checks the opened
    file, not the name, so no link swapped in between can lead to a device. Raises
    ``NotARegularFile`` for anything but a regular file; ``follow=False`` also refuses
    a symbolic link at ``path`` itself (``ELOOP``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(errno.EINVAL, f"{_kind(mode)}, not a regular file", str(path))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _umask() -> int:
    # The umask cannot be read without setting it (not thread-safe); Linux shows it.
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int | None = None) -> Path:
    """Write ``data`` to ``path``: whole or not at all, safe beside any number of
    writers of the same path (each has its own temporary file; the last rename wins
    with a whole file). The directory must exist. The file gets ``mode`` (default: what
    a new file gets under the umask). Returns ``path``; on failure (a full disk, a
    directory that cannot be written) raises ``OSError`` naming ``path`` and leaves no
    temporary file. Text is written as UTF-8; a character UTF-8 cannot hold (a path's
    undecodable byte, which Python keeps as a lone surrogate) is written as its escape
    (``\\udcff``), so a report that names such a path is still whole and readable."""
    target = Path(path)
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    try:
        # mkstemp: O_CREAT | O_EXCL, mode 0600, a random name: nothing planted is opened.
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror, str(target)) from None
        raise
    return target


@contextlib.contextmanager
def locked_dir(directory: str | os.PathLike[str], timeout_s: float = 30.0) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` itself (no lock file is left behind)
    for the block: other processes' blocks on the same directory wait, at most
    ``timeout_s`` (then ``OSError``; the blocks it guards take milliseconds). Where flock
    does not exist, the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    import time

    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(
                        errno.ETIMEDOUT,
                        f"another process held its lock for over {timeout_s:g}s",
                        str(directory),
                    ) from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # closing releases the lock
