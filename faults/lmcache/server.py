"""Launch a real ``lmcache`` multiprocess server on loopback, and always clean it up.

``LMCacheServer`` starts ``python -m lmcache.v1.multiprocess.server`` bound to
``127.0.0.1`` on a free port, with a private shared-memory pool name, metrics off (so
nothing listens on 0.0.0.0:9090) and usage tracking off. It waits until the server
answers, and on ``stop()`` / ``__exit__`` / interpreter exit / garbage collection it
stops the whole process group (SIGCONT so a paused server can die, SIGTERM, then
SIGKILL) and removes what the server left: its ``/dev/shm`` segments and its private
temporary directory (log file).

The child also gets ``PR_SET_PDEATHSIG`` so it dies with the test process even when
that process is killed with SIGKILL (no finalizer runs then); the segments such a run
leaves behind are swept by the next ``LMCacheServer`` (``sweep_stale_segments``),
because every segment name carries the owning process id.

This module does not import lmcache or torch; it only checks that lmcache is
installed before it launches anything.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import IO, Callable, Sequence

from kvfault.faults.errors import KvfaultError
from kvfault.faults.processes import running, stop_group
from kvfault.faults.tiers import TierUnavailable
from kvfault.reference.errors import RebuiltWhenUnpickled

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "lmcache_l1_pool_"  # lmcache prepends this to --shm-name
NAME_PREFIX = "kvfault"
TMP_PREFIX = "kvfault-lmcache-"  # + owner pid + "-": private log directory (mode 0700)
READY_LINE = "LMCache cache server is running..."
# How long ``pause`` waits for SIGSTOP to stop every thread (64 ms at most seen at
# load 8 on the 2-core box; a stop that takes longer than this is reported, not ignored).
PAUSE_SETTLE_S = 10.0
# kvfault is not on a package index: the extra installs from a checkout, with the
# constraints that pin the CPU build of torch (the README's command).
INSTALL_HINT = (
    "install the lmcache extra: pip install -c constraints/ci.txt '.[lmcache]' (see README)"
)

_LIVE: weakref.WeakSet[LMCacheServer] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


class LMCacheNotInstalled(RebuiltWhenUnpickled, TierUnavailable):
    """lmcache is not importable in this interpreter."""

    def __init__(self, python: str):
        super().__init__(f"lmcache is not installed for {python}; {INSTALL_HINT}")


class LMCacheServerError(KvfaultError, RuntimeError):
    """The server did not start, or died; carries the tail of its log."""


class LMCacheServerWedged(RebuiltWhenUnpickled, LMCacheServerError):
    """The server process is alive but does not answer; carries the tail of its log."""

    def __init__(self, server: LMCacheServer, what: str):
        state = server.process_state() or "?"
        tail = server.log_tail(20) or "(empty)"
        super().__init__(
            f"lmcache server pid {server.pid} at {server.url} is alive (state {state}) "
            f"but did not answer {what}; server log tail:\n{tail}"
        )


LOCK_NAME = "lmcache-tier.lock"


def _lock_dir() -> Path:
    """A per-user directory (0700) for the host-wide real-tier lock, short and fixed so
    every kvfault process of this user finds the same lock whatever its TMPDIR."""
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    path = base / f"kvfault-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_uid != os.getuid() or path.is_symlink():
        raise LMCacheServerError(f"{path} is not this user's directory; remove it")
    return path


class RealTierLock:
    """One real-tier campaign at a time on this host, for this user (``fcntl.flock``,
    released by the kernel when the holder exits, also on SIGKILL).

    Why: real-tier scenarios run in real time against deadlines scaled to seconds (a
    6 s transfer deadline, an 8 s load bound). Two campaigns at once share the host's
    cores with two lmcache servers and four pump threads; on two cores that delays
    replies past those bounds, and healthy runs stop (``no_false_stop`` fails) or a
    tier's setup times out. So a second campaign waits, and says so in one line.
    """

    def __init__(self, note: Callable[[str], None] | None = None, path: Path | None = None):
        self.path = path or _lock_dir() / LOCK_NAME
        self.note = note or (lambda line: print(line, file=sys.stderr, flush=True))
        self._fd: int | None = None

    def holder(self) -> str:
        """The pid the lock's holder wrote; it writes it just after taking the lock,
        so a waiter that looks at once may have to look again."""
        for _ in range(40):
            try:
                text = self.path.read_text().strip()
            except OSError:
                text = ""
            if text:
                return text
            time.sleep(0.025)
        return "?"

    def acquire(self) -> RealTierLock:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.note(
                    f"kvfault: another real-tier campaign (pid {self.holder()}) is running on "
                    "this host; waiting for it to finish (real-time deadlines do not survive "
                    "sharing the cores)"
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RealTierLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lmcache_available(python: str | None = None) -> bool:
    """True when ``lmcache`` and the torch it needs are installed (in this interpreter,
    or in ``python``); nothing is imported."""
    # Paths compared as given, not resolved: a virtual environment's python is a link to
    # its base interpreter, and the two see different packages.
    if python is None or os.path.abspath(python) == os.path.abspath(sys.executable):
        return all(importlib.util.find_spec(m) is not None for m in ("lmcache", "torch"))
    probe = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util as u,sys; "
            "sys.exit(any(u.find_spec(m) is None for m in ('lmcache', 'torch')))",
        ],
        capture_output=True,
        timeout=60,
    )
    return probe.returncode == 0


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it moments later;
    ``LMCacheServer.start`` retries on the rare collision)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sweep_stale_segments() -> list[str]:
    """Remove ``/dev/shm`` segments and temporary directories of kvfault servers whose
    owning process is gone (it was SIGKILLed, so no finalizer ran).

    Names look like ``lmcache_l1_pool_kvfault_<owner pid>_<hex>`` and
    ``kvfault-lmcache-<owner pid>-<random>`` (a server's, or ``...-client-<random>``, a
    session's client log). Returns what was removed. Leftovers of
    live owners (other test processes) are left alone.
    """
    removed: list[str] = []
    tmp = Path(tempfile.gettempdir())
    for path in tmp.glob(f"{TMP_PREFIX}*"):
        owner = path.name[len(TMP_PREFIX) :].split("-")[0]
        if owner.isdigit() and not running(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    if not SHM_DIR.is_dir():
        return removed
    for path in SHM_DIR.glob(f"*{NAME_PREFIX}_*"):
        parts = path.name.split(f"{NAME_PREFIX}_", 1)[1].split("_")
        if not parts or not parts[0].isdigit():
            continue
        if running(int(parts[0])):
            continue
        try:
            path.unlink()
            removed.append(path.name)
        except FileNotFoundError:
            pass
    return removed


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class LMCacheServer:
    """A real lmcache MP server on 127.0.0.1; a context manager.

    Promises: after ``start()`` returns, the server accepts requests at ``url`` and
    nothing of it listens outside loopback. After ``stop()`` (or the ``with`` block, or
    interpreter exit) the process group is gone, and no ``/dev/shm`` segment named
    after ``shm_name`` and no temporary file of it remain. ``stop()`` is idempotent and
    safe to call from a finalizer.
    """

    def __init__(
        self,
        chunk_size: int = 256,
        l1_size_gb: float = 0.25,
        *,
        python: str | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 60.0,
        eviction_policy: str = "LRU",
    ):
        self.python = python or sys.executable
        self.chunk_size = chunk_size
        self.l1_size_gb = l1_size_gb
        self.extra_args = tuple(extra_args)
        self.start_timeout_s = start_timeout_s
        self.eviction_policy = eviction_policy
        self.shm_name = f"{NAME_PREFIX}_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None
        self.tmpdir: Path | None = None
        self._log_file: object | None = None
        self._stopped = threading.Event()
        self._finalizer: weakref.finalize | None = None

    # -- properties ----------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def shm_segment(self) -> str:
        """Name of the pool segment under /dev/shm."""
        return SHM_PREFIX + self.shm_name

    @property
    def log_path(self) -> Path | None:
        return self.tmpdir / "server.log" if self.tmpdir else None

    def log_tail(self, lines: int = 30) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return ""
        text = path.read_text(errors="replace").splitlines()
        keep = [ln for ln in text if "Warning" not in ln and "warnings.warn" not in ln]
        return "\n".join(keep[-lines:])

    def command(self) -> list[str]:
        return [
            self.python, "-m", "lmcache.v1.multiprocess.server",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--chunk-size", str(self.chunk_size),
            "--supported-transfer-mode", "engine_driven",
            "--shm-name", self.shm_name,
            "--l1-size-gb", str(self.l1_size_gb),
            "--no-l1-use-lazy",  # lmcache only advertises the SHM pool when eager
            "--eviction-policy", self.eviction_policy,
            "--disable-metrics",
            *self.extra_args,
        ]  # fmt: skip

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> LMCacheServer:
        """Launch and wait until it answers; raises ``LMCacheNotInstalled`` or
        ``LMCacheServerError`` (with the log tail) and leaves nothing behind then."""
        if self.proc is not None:
            raise LMCacheServerError("server already started")
        if not lmcache_available(self.python):
            raise LMCacheNotInstalled(self.python)
        sweep_stale_segments()
        last_error: LMCacheServerError | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            try:
                self._launch_once()
                return self
            except LMCacheServerError as exc:
                last_error = exc
                self.stop()
                self._stopped.clear()
                self.proc = None
        assert last_error is not None  # every attempt failed
        raise last_error

    def _launch_once(self) -> None:
        self.port = free_loopback_port()
        self.tmpdir = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
        os.chmod(self.tmpdir, 0o700)
        env = dict(os.environ)
        env["LMCACHE_TRACK_USAGE"] = "false"
        env.setdefault("PYTHONUNBUFFERED", "1")
        log = open(self.tmpdir / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.tmpdir,  # never run inside a directory that shadows stdlib names
            start_new_session=True,  # own process group: stop() kills all of it
            preexec_fn=_set_pdeathsig,
        )
        with _LIVE_LOCK:
            _LIVE.add(self)
        # A finalizer that holds no reference to self, so an abandoned server dies too.
        self._finalizer = weakref.finalize(
            self, _stop_server, self.proc, self.shm_segment, self.tmpdir, log
        )
        deadline = t0 + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LMCacheServerError(
                    f"lmcache server exited with {self.proc.returncode} during start:\n"
                    f"{self.log_tail()}"
                )
            if (
                READY_LINE in (self.log_path.read_text(errors="replace") if self.log_path else "")
                and self._port_open()
            ):
                self.start_seconds = time.monotonic() - t0
                return
            time.sleep(0.05)
        raise LMCacheServerError(
            f"lmcache server did not answer within {self.start_timeout_s:g}s:\n{self.log_tail()}"
        )

    def _port_open(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def process_state(self) -> str | None:
        """The kernel's state letter for the server (``R``, ``S``, ``T`` when stopped...),
        None when it is gone or unknown."""
        if not self.alive():
            return None
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        return stat.rsplit(")", 1)[1].split()[0]

    def kill(self) -> None:
        """SIGKILL the server now (a crash); ``stop()`` still cleans up after it."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def pause(self, settle_s: float = PAUSE_SETTLE_S) -> None:
        """SIGSTOP the server's process group (it stops answering, sockets stay); returns
        once the kernel reports the stop complete (every thread of the server stopped),
        so a request sent after it returns is never answered before SIGCONT. Raises
        ``LMCacheServerError`` naming the threads' states when the stop has not landed
        within ``settle_s``.

        Why it waits: a stop signal sent to a process goes to ONE of its threads; the
        others are stopped only once that thread runs and starts the group stop. Until
        then the server's zmq I/O thread and request threads keep running, and on a
        loaded box (two busy loops beside a 2-core run) a request sent right after
        ``killpg`` was answered 4 times in 60."""
        if not self.alive():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + settle_s
        while not self._group_stopped():
            if not self.alive():
                return  # died meanwhile: it answers nothing either
            if time.monotonic() >= deadline:
                raise LMCacheServerError(
                    f"lmcache server pid {self.pid} was sent SIGSTOP but had not stopped "
                    f"after {settle_s:g}s (thread states: {self._thread_states() or '?'})"
                )
            time.sleep(0.001)

    def _group_stopped(self) -> bool:
        """Whether the server's group stop is complete, as the kernel reports it to the
        parent (``waitid`` WSTOPPED, without consuming the report)."""
        assert self.proc is not None
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False  # reaped meanwhile: the caller sees it is not alive
        return info is not None

    def _thread_states(self) -> str:
        """The kernel's state letter of each thread of the server, e.g. ``TTTS`` (for
        messages); empty when unreadable."""
        states = []
        try:
            for task in Path(f"/proc/{self.pid}/task").iterdir():
                with contextlib.suppress(OSError):  # a thread that exited meanwhile
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            return ""
        return "".join(states)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the process group and remove its segments and files. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._finalizer is not None:
            self._finalizer()  # runs _stop_server once
        elif self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this server still exists: process, shm segment, tmp dir (for tests)."""
        left: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            left.append(f"process {self.proc.pid}")
        if (SHM_DIR / self.shm_segment).exists():
            left.append(f"/dev/shm/{self.shm_segment}")
        if self.tmpdir is not None and self.tmpdir.exists():
            left.append(str(self.tmpdir))
        return left

    def __enter__(self) -> LMCacheServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LMCacheServer(url={self.url!r}, pid={self.pid}, shm={self.shm_name!r})"


def _stop_server(
    proc: subprocess.Popen[bytes], segment: str, tmpdir: Path | None, log: IO[bytes]
) -> None:
    """Stop a server's process group and remove its leftovers (finalizer body: every
    wait bounded, nothing raised for what is already gone)."""
    stop_group(proc, grace=10.0)
    with contextlib.suppress(FileNotFoundError):
        (SHM_DIR / segment).unlink()
    with contextlib.suppress(Exception):
        log.close()
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()
