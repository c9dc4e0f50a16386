"""One simulated host for one run of the ``atom`` tier: its servers, each a scheduler
process and a worker process per TP rank, sharing one private socket directory (what
``/tmp/vllm_rpc`` is to real servers on one host) and nothing else. A server placed on
another ``machine`` gets a socket directory of its own; servers with a shared tier
share its directory, as servers on two machines share a cache server.

Everything a host starts is gone when ``close`` returns, however the run ended: the
servers are asked to close, any process still alive is killed by its pid, and the
host's directory (sockets included) is removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import replace
from multiprocessing.connection import Listener
from typing import Any

from kvfault.faults.atom import pipe
from kvfault.faults.atom.spec import AtomRequest, RawEvent, ServerSpec
from kvfault.faults.atom.zygote import Zygote
from kvfault.faults.errors import KvfaultError
from kvfault.faults.processes import wait_ended
from kvfault.reference.errors import RebuiltWhenUnpickled
from kvfault.reference.signals import stop_signals_held


class ServerRefused(KvfaultError, RuntimeError):
    """A server did not start: ATOM (or lmcache under it) refused; one line. ``error``
    names the exception it refused with (``ServerRefused`` when it never answered)."""

    def __init__(self, message: str, error: str = "ServerRefused"):
        super().__init__(message)
        self.error = error


class ServerDied(RebuiltWhenUnpickled, KvfaultError, RuntimeError):
    """A server's model runner raised in a forward: ATOM's worker process dies and its
    process monitor shuts the server down. ``error`` names the exception."""

    def __init__(self, server: str, evidence: dict[str, Any]):
        super().__init__(f"{server}: {evidence['died']}")
        self.server, self.error = server, str(evidence["error"])


class ServerHung(RebuiltWhenUnpickled, KvfaultError, RuntimeError):
    """A call into a server's worker did not return within its run's bound: the code
    under test hung. ``evidence``: the call, one line, and the worker's stack."""

    def __init__(self, server: str, evidence: dict[str, Any]):
        super().__init__(f"{server}: {evidence['hung']}")
        self.evidence = evidence


class ZygotePool:
    """Warm interpreters by hash seed, started on first use, closed together."""

    def __init__(self, atom_src: str):
        self.atom_src = atom_src
        self._by_seed: dict[int, Zygote] = {}

    def get(self, seed: int) -> Zygote:
        if seed not in self._by_seed:
            self._by_seed[seed] = Zygote(self.atom_src, seed)
        return self._by_seed[seed]

    def close(self) -> None:
        with stop_signals_held():  # whole, as AtomHost.close
            for z in self._by_seed.values():
                z.close()
            self._by_seed.clear()


class Server:
    """The host's handle on one started server (its scheduler process)."""

    def __init__(self, host: AtomHost, spec: ServerSpec, conn: Any, pids: list[int]):
        self.host, self.spec, self.conn, self.pids = host, spec, conn, pids
        self.closed = False

    def _call(self, cmd: str, *args: Any, timeout_s: float = 60.0) -> Any:
        value = pipe.call(self.conn, cmd, args, timeout_s, self.host.events, self.spec.name)
        if isinstance(value, dict) and "hung" in value:  # the scheduler's WorkerHung
            raise ServerHung(self.spec.name, value)
        if isinstance(value, dict) and "died" in value:  # the scheduler's RunnerFailed
            raise ServerDied(self.spec.name, value)
        return value

    def submit(self, requests: list[AtomRequest]) -> None:
        self._call("submit", requests)

    def run(self, limit_s: float, until_answered: bool = False) -> bool:
        """Step until idle (True) or ``limit_s`` (False: hung); with ``until_answered``,
        only until every request is answered (KV work may still be in flight)."""
        return bool(self._call("run", limit_s, until_answered, timeout_s=limit_s + 60.0))

    def quiescent(self) -> None:
        self._call("quiescent")

    def wait_stored(
        self, tokens: list[int], want: int, limit_s: float, backend: str | None = None
    ) -> bool:
        """Wait (at most ``limit_s``) until the tier holds ``want`` tokens of ``tokens``
        from the start (with ``backend``: that lmcache storage backend does); whether
        it did."""
        args = (tokens, want, limit_s, backend)
        return bool(self._call("wait_stored", *args, timeout_s=limit_s + 60.0))

    def settle(self, limit_s: float) -> bool:
        """Wait (at most ``limit_s``) until no save or load of ATOM's is left in this
        server's workers, stepping nothing; whether none was. A worker that cannot
        count them (an ATOM without its KV threads) waits the whole ``limit_s``."""
        return bool(self._call("settle", limit_s, timeout_s=limit_s + 60.0))

    def shut_down(self) -> None:
        """ATOM's engine shutdown (its loop's exit path), then the quiescent record."""
        self._call("shut_down")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            executed = self._call("close", timeout_s=30.0)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            executed = None
        for f, fn, line, times in executed or ():
            self.host.executed[(f, fn, line)] += times
        self.conn.close()


class AtomHost:
    """Servers on one host. ``seconds()`` is time since the host opened."""

    def __init__(self, zygotes: ZygotePool, default_seed: int = 0):
        self.zygotes = zygotes
        self.default_seed = default_seed
        self.dir = tempfile.mkdtemp(prefix="kvfault-atom-")
        self.socket_dir = os.path.join(self.dir, "rpc")
        os.makedirs(self.socket_dir)
        self.authkey = os.urandom(16)
        self.listener = Listener(
            os.path.join(self.dir, "host.sock"), family="AF_UNIX", authkey=self.authkey
        )
        # Listener.accept takes no timeout; its socket does
        self.listener._listener._socket.settimeout(180.0)  # type: ignore[attr-defined]  # private
        self.t0 = time.monotonic()
        self.events: list[RawEvent] = []
        self.servers: list[Server] = []
        self.pids: list[int] = []  # every server process forked, started or not
        # ATOM's lines its servers executed (ServerSpec.record_path), and how often
        self.executed: Counter[tuple[str, str, int]] = Counter()
        self.instance_ids: dict[str, str] = {}  # server name -> its latest start's token

    def start(self, spec: ServerSpec, timeout_s: float = 180.0) -> Server:
        """Start ``spec``'s worker and scheduler; return when ATOM's scheduler side is
        built. ``ServerRefused`` (one line) when either side failed to start."""
        sched_seed = spec.scheduler_hash_seed
        worker_seed = spec.worker_hash_seed
        sched_seed = self.default_seed if sched_seed is None else sched_seed
        worker_seed = self.default_seed if worker_seed is None else worker_seed
        instance_id = self._instance_id(spec)
        listen = os.path.join(self.dir, f"{spec.name}-{len(self.servers)}.sock")
        socket_dir = self.socket_dir
        if spec.machine:  # another machine's /tmp/vllm_rpc
            socket_dir = os.path.join(self.dir, f"rpc-{spec.machine}")
            os.makedirs(socket_dir, exist_ok=True)
        pids = [
            self.zygotes.get(sched_seed).fork(
                "scheduler",
                {
                    "spec": spec,
                    "host": os.path.join(self.dir, "host.sock"),
                    "listen": listen,
                    "authkey": self.authkey,
                    "socket_dir": socket_dir,
                    "instance_id": instance_id,
                },
            )
        ]
        self.pids.extend(pids)  # known to close() from now on, however the start ends
        conn = self.listener.accept()
        if not conn.poll(timeout_s):
            raise ServerRefused(f"{spec.name}: the scheduler did not start")
        conn.recv()  # ("listening", name, pid)
        # One worker process per TP rank of each pipeline stage.
        for rank in range(spec.tp_size * spec.pp_size):
            pids.append(
                self.zygotes.get(worker_seed).fork(
                    "worker",
                    {
                        "spec": spec,
                        "address": listen,
                        "authkey": self.authkey,
                        "socket_dir": socket_dir,
                        "instance_id": instance_id,
                        "rank": rank,
                    },
                )
            )
            self.pids.append(pids[-1])
        server = Server(self, spec, conn, pids)
        self.servers.append(server)
        if not conn.poll(timeout_s):
            raise ServerRefused(f"{spec.name}: not ready within {timeout_s:g}s")
        status, detail, events = conn.recv()
        self.events.extend(events)
        if status != "ready":
            server.closed = True
            error, line = detail  # the exception's name, and its one line
            raise ServerRefused(f"{spec.name}: {line}", error=error)
        return server

    def _instance_id(self, spec: ServerSpec) -> str:
        """The token of the fixed ATOM's ``Config.instance_id`` (finding 4): a server's
        main process draws it once as it builds the ``Config`` it pickles to all its
        processes, so here one per start, handed to the server's scheduler and every
        worker; a DP replica of a started server (``spec.replica_of``) shares its
        token, as ATOM's DP ranks of one server share its ``Config``."""
        if spec.replica_of:
            if spec.replica_of not in self.instance_ids:
                raise ValueError(f"{spec.name}: replica of {spec.replica_of!r}, not started")
            return self.instance_ids[spec.replica_of]
        self.instance_ids[spec.name] = uuid.uuid4().hex[:12]
        return self.instance_ids[spec.name]

    def note_fault(self, injector: str, **evidence: Any) -> None:
        """A fault the host applied itself (a server's configuration), as an event."""
        self.events.append(
            RawEvent(time.monotonic(), -1, "fault", None, None, {"injector": injector, **evidence})
        )

    def note_refusal(self, refused: ServerRefused) -> None:
        """A server's refusal to start, as the stop event every tier records for one."""
        data = {"error": refused.error, "message": str(refused)}
        self.events.append(RawEvent(time.monotonic(), -1, "stop", None, None, data))

    def note_death(self, died: ServerDied) -> None:
        """A server ATOM shut down mid-run (its model runner raised), as a stop event
        naming no operation."""
        data = {"error": died.error, "message": str(died), "server": died.server}
        self.events.append(RawEvent(time.monotonic(), -1, "stop", None, None, data))

    def restart(self, server: Server, **changes: Any) -> Server:
        """Stop ``server`` and start it again (what its tier kept depends on where the
        tier lives: lmcache's CPU pool lives in the worker and goes with it)."""
        server.close()
        self.events.append(
            RawEvent(time.monotonic(), -1, "restart", None, None, {"server": server.spec.name})
        )
        return self.start(replace(server.spec, **changes))

    def close(self) -> None:
        """Everything the host started is gone when this returns. Run whole: a Ctrl-C
        that lands in it (the campaign is closing a run as the terminal's SIGINT
        arrives) is raised once it is done, not halfway with the directory left."""
        with stop_signals_held():
            self._close()

    def _close(self) -> None:
        for server in self.servers:
            server.close()
        # Also the processes of a server whose start was cut short (Ctrl-C mid-start):
        # alive, they would write into the directory as it is removed.
        for pid in wait_ended(self.pids, 5.0):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_ended(self.pids, 5.0)  # SIGKILLed: gone before the directory goes
        self.listener.close()
        for _ in range(50):  # a bounded retry: something may still be closing in it
            shutil.rmtree(self.dir, ignore_errors=True)
            if not os.path.exists(self.dir):
                break
            time.sleep(0.02)
