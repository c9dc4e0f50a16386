"""Server processes for the ``atom`` tier, forked from a warm parent.

Importing torch, lmcache and ATOM costs seconds of CPU per process; a run starts two to
six server processes. A zygote is one interpreter, started with its own
``PYTHONHASHSEED``, that imports all of that once (with the boundary fakes installed)
and then forks a fresh process per server role on request. Forked processes share the
zygote's hash seed, exactly as processes started with one ``PYTHONHASHSEED`` do; a
server whose scheduler and worker must hash differently takes them from two zygotes.
Nothing is initialised before the fork (no lmcache engine, no ZMQ context, no socket),
so every server process starts as clean as a spawned one.

Host side: ``Zygote`` (start, ``fork(role, args)``, close). Zygote side: ``main``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kvfault.faults.errors import KvfaultError

_PRELOAD = (
    "torch",
    "lmcache.v1.cache_engine",
    "lmcache.v1.lookup_client.factory",
    "lmcache.v1.lookup_client.lmcache_lookup_client",
    "atom.utils.forward_context",
    "atom.model_engine.scheduler",
    "atom.model_engine.engine_core",
    "atom.kv_transfer.offload.connector",
    # kvfault's own server side, so a fork reads nothing from disk (and a checkout
    # edited during a campaign cannot change it halfway)
    "kvfault.fakes.model",
    "kvfault.faults.atom.worker",
    "kvfault.faults.atom.scheduler",
    "kvfault.faults.atom.processes",
)


# An import that uses under STALL_CPU_S of CPU over STALL_S of wall time has blocked:
# at load 35 on two cores a runnable process still gets over 1 s of CPU in 20 s.
STALL_S = 20.0
STALL_CPU_S = 0.05


def _cpu_s(pid: int) -> float | None:
    """CPU seconds process ``pid`` has used (all its threads), from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ZygoteError(KvfaultError, RuntimeError):
    """A zygote could not start or fork: one line."""


class Zygote:
    """One warm interpreter with ``hash_seed``, on ``atom_src``'s ATOM."""

    def __init__(self, atom_src: str, hash_seed: int, start_timeout_s: float = 300.0):
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONHASHSEED"] = str(hash_seed)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.hash_seed = hash_seed
        # What the zygote and its servers print goes to a file nobody has to drain
        # (a pipe would block them once full); its last line explains a failed start.
        self.log = tempfile.TemporaryFile()
        # torch's inductor makes its cache directory (torchinductor_USER) in $TMPDIR as
        # ATOM imports; give it one of ours instead, removed with the zygote.
        self.cache = tempfile.mkdtemp(prefix="kvfault-zygote-")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.cache, "inductor")
        try:
            self._start(atom_src, env, theirs, ours, start_timeout_s)
        except BaseException:  # a failed or interrupted start leaves nothing either
            theirs.close()
            ours.close()
            self.close()
            raise

    def _start(
        self,
        atom_src: str,
        env: dict[str, str],
        theirs: socket.socket,
        ours: socket.socket,
        start_timeout_s: float,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvfault.faults.atom.zygote", atom_src, str(theirs.fileno())],
            env=env,
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        if not self._wait_started(start_timeout_s):
            raise ZygoteError(
                f"the atom tier cannot import ATOM from {atom_src}: {self._stalled_where()}"
            )
        try:
            ok, detail = self.conn.recv()
        except EOFError:
            ok, detail = False, self._stderr_tail()
        if not ok:
            raise ZygoteError(f"the atom tier cannot import ATOM from {atom_src}: {detail}")

    def _wait_started(self, limit_s: float) -> bool:
        """Wait for the zygote's answer; False when it did not come within ``limit_s``,
        or its import stopped using the CPU for ``STALL_S`` (it sleeps or waits: a
        slow machine still gives it some CPU, a blocked import none)."""
        deadline = time.monotonic() + limit_s
        last, still_since = _cpu_s(self.proc.pid), time.monotonic()
        self.stalled = False
        while not self.conn.poll(min(1.0, max(0.0, deadline - time.monotonic()))):
            now = time.monotonic()
            if now >= deadline:
                return False
            used = _cpu_s(self.proc.pid)
            if used is None or last is None or used - last > STALL_CPU_S:
                last, still_since = used, now
            elif now - still_since >= STALL_S:
                self.stalled = True
                return False
        return True

    def _stalled_where(self) -> str:
        """Why the start was given up, with where the import was (its stack, written
        by the zygote's faulthandler on SIGUSR1)."""
        what = (
            f"the import blocked (no CPU used for {STALL_S:g}s)"
            if self.stalled
            else "the import did not finish within its bound"
        )
        with contextlib.suppress(OSError):
            self.log.seek(0, os.SEEK_END)
            mark = self.log.tell()
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(0.5)
            self.log.seek(mark)
            dump = self.log.read().decode(errors="replace")
            frames = [ln.strip() for ln in dump.splitlines() if ln.strip().startswith("File ")]
            mine = [f for f in frames if "<frozen " not in f]
            if mine:
                return f"{what}; in {mine[0]}"
        return what

    def _stderr_tail(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.log.seek(0)
        err = self.log.read().decode(errors="replace")
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {self.proc.returncode}"

    def fork(self, role: str, args: dict[str, Any], timeout_s: float = 30.0) -> int:
        """Fork a process that runs ``role`` with ``args``; its pid."""
        self.conn.send(("fork", role, args))
        if not self.conn.poll(timeout_s):
            raise ZygoteError(f"the zygote did not fork a {role} within {timeout_s:g}s")
        return int(self.conn.recv())

    def close(self) -> None:
        """Stop the zygote and remove what it made; safe on a zygote half started."""
        conn, proc = getattr(self, "conn", None), getattr(self, "proc", None)
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("exit", None, None))
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.log.close()
        if conn is not None:
            conn.close()
        shutil.rmtree(self.cache, ignore_errors=True)


def main(argv: list[str]) -> int:
    import faulthandler
    import gc

    atom_src, fd = argv[0], int(argv[1])
    conn = Connection(fd)
    # An import that blocks: the host asks (SIGUSR1) where, into the zygote's log.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    sys.path.insert(0, atom_src)
    try:
        import importlib
        import logging

        from kvfault.faults.atom import boundary

        # No socket directory yet: each forked server points the shim at its host's.
        boundary.install_all(None)
        boundary.install_kernels()
        for name in _PRELOAD:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as e:
                # A module this ATOM does not have is the servers' problem to name
                # (feature detection); a dependency it lacks is this one's.
                own = e.name or ""
                if not (own.startswith("atom.") and name.startswith(own)):
                    raise
        logging.disable(logging.WARNING)  # lmcache's and ATOM's info/warning lines
    except Exception as e:  # noqa: BLE001  one line back to the host
        conn.send((False, f"{type(e).__name__}: {e}"))
        return 1
    # What the imports made is every server's, read-only: frozen, a server's collections
    # (lmcache's engine runs a full one as it starts) skip it and leave its pages shared
    # with the zygote instead of touching every object's header in every fork.
    gc.collect()
    gc.freeze()
    conn.send((True, None))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked servers reap themselves
    while True:
        try:
            cmd, role, args = conn.recv()
        except EOFError:
            return 0
        if cmd == "exit":
            return 0
        pid = os.fork()
        if pid == 0:
            conn.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = 1
            try:
                from kvfault.faults.atom.processes import child_main

                code = child_main(role, args)
            finally:
                os._exit(code)
        conn.send(pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
