"""The lookup channel between a scheduler and its worker's tier: pyzmq over ``ipc://``.

One lookup server per engine binds ``lookup_socket_path`` under a private directory
(mode 0700). Startup refuses a path already served by a live server. pyzmq is imported
here only, so paths that need no socket never import it.

An ``ipc://`` path must fit in ``sockaddr_un.sun_path`` (107 bytes on Linux, 103 on
macOS), so the private directory goes under the first short enough temp dir: ``TMPDIR``
when it is short, else ``/tmp`` (a macOS ``TMPDIR`` alone is ~50 bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
from typing import Any

from kvfault.reference.errors import EngineIdentityConflict
from kvfault.reference.interfaces import LookupClient, LookupQuery, LookupResult
from kvfault.reference.pids import running
from kvfault.reference.signals import stop_signals_held

_PROBE_TIMEOUT_S = 5.0

# sizeof(sockaddr_un.sun_path) less the NUL: 107 on Linux, 103 on macOS.
IPC_PATH_MAX = 103 if sys.platform == "darwin" else 107
# Room left below the private directory for a socket name: the longest the stack makes,
# engine_kvfault-offload-r65535-dp0_service_lookup_rpc_port_0 (59), plus slack for
# multi-digit ranks.
SOCKET_NAME_ROOM = 64
_FALLBACK_BASES = ("/tmp", "/var/tmp", "/dev/shm")
OWNER_FILE = ".owner"  # in each private directory: the pid that made it


def rpc_base_budget(prefix: str = "kvfault-rpc-") -> int:
    """The longest temp dir under which ``private_rpc_dir(prefix)`` may go."""
    return IPC_PATH_MAX - SOCKET_NAME_ROOM - len(prefix) - 8 - 1  # mkdtemp adds 8 + "/"


def _rpc_base(prefix: str) -> str:
    """The first temp dir under which ``<prefix>XXXXXXXX/<socket name>`` fits."""
    budget = rpc_base_budget(prefix)
    candidates = (tempfile.gettempdir(), *_FALLBACK_BASES)
    for base in candidates:
        if len(base) <= budget and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return base
    raise OSError(
        f"no temp dir short enough for ipc:// sockets (TMPDIR={tempfile.gettempdir()!r} "
        f"is {len(tempfile.gettempdir())} bytes; at most {budget} fit): "
        "set TMPDIR to a short writable directory"
    )


def private_rpc_dir(prefix: str = "kvfault-rpc-", made: list[str] | None = None) -> str:
    """A fresh directory only this user can enter (0700), short enough that every
    ``lookup_socket_path`` in it fits an ``ipc://`` address: under the temp dir when
    that is short, else under ``/tmp`` (raises ``OSError`` naming ``TMPDIR`` if no
    candidate is short and writable).

    The path is also appended to ``made`` before a stop signal can interrupt the
    caller: a caller that removes what ``made`` holds in a ``finally`` (entered before
    this call) leaves nothing behind, whenever a SIGINT, SIGTERM or SIGHUP lands."""
    with stop_signals_held():
        path = tempfile.mkdtemp(prefix=prefix, dir=_rpc_base(prefix))  # mode 0700 already
        if made is not None:
            made.append(path)
        # Who made it, so that a directory whose maker was killed before it could
        # remove it (SIGKILL, a hang guard's exit) can be told from one still in use.
        with open(os.path.join(path, OWNER_FILE), "w") as f:
            f.write(str(os.getpid()))
        os.chmod(path, stat.S_IRWXU)
    return path


def remove_rpc_dir(path: str) -> None:
    """Remove a ``private_rpc_dir`` and what it holds. Its owner file goes last, so a
    removal cut short (a signal landing in it) leaves a directory that still names its
    maker, which ``remove_orphan_rpc_dirs`` then removes."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for name in names:
        if name != OWNER_FILE:
            inner = os.path.join(path, name)
            if os.path.isdir(inner) and not os.path.islink(inner):
                shutil.rmtree(inner, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(inner)
    shutil.rmtree(path, ignore_errors=True)


def remove_orphan_rpc_dirs(prefix: str = "kvfault-rpc-", empty_unowned: bool = False) -> list[str]:
    """Remove every ``private_rpc_dir(prefix)`` of this user, under the temp dir or a
    fallback, whose maker has ended without removing it; returns the paths removed.
    One whose maker still runs is kept. One naming no maker is kept too (it may be
    being made), unless ``empty_unowned``: then an empty one goes (a removal cut short
    leaves that; so, for the microseconds before its owner file is written, does a
    directory being made, whose maker then fails with ``FileNotFoundError``: pass it
    only when no other kvfault command can be making one, after a stop)."""
    removed = []
    for base in dict.fromkeys((tempfile.gettempdir(), *_FALLBACK_BASES)):
        try:
            names = [n for n in os.listdir(base) if n.startswith(prefix)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(base, name)
            try:
                if os.lstat(path).st_uid != os.getuid():
                    continue
                with open(os.path.join(path, OWNER_FILE)) as f:
                    pid = int(f.read())
            except (OSError, ValueError):
                if empty_unowned and not os.path.exists(os.path.join(path, OWNER_FILE)):
                    with contextlib.suppress(OSError):  # not empty: kept
                        os.rmdir(path)
                        removed.append(path)
                continue
            if not running(pid):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _encode_query(query: LookupQuery) -> bytes:
    return json.dumps(
        {"ids": list(query.tier_ids), "states": [list(c) for c in query.state_candidates]}
    ).encode()


def _decode_query(frame: bytes) -> LookupQuery:
    obj = json.loads(frame)
    if not isinstance(obj, dict) or not isinstance(obj.get("ids"), list):
        raise ValueError("lookup frame must be an object with an 'ids' list")
    ids = tuple(int(t) for t in obj["ids"])
    states = tuple((int(p), int(k)) for p, k in obj.get("states", []))
    return LookupQuery(ids, states)


def path_is_live(path: str, zmq_context: Any = None) -> bool:
    """Whether a live server listens on the ``ipc://`` socket at ``path``.

    Asked of the kernel, not of the server: connecting to a listening Unix socket
    completes in the kernel's accept queue whether or not the server's thread runs,
    and a socket file nobody listens on refuses at once. So a busy machine cannot make
    a live server look dead (a ping with a reply deadline did, under load).
    ``zmq_context`` is accepted for callers that pass one; it is not needed."""
    del zmq_context
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_S)
    try:
        probe.connect(path)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        return False
    except TimeoutError:
        return True  # a full accept queue: someone listens, and is busy
    finally:
        probe.close()
    return True


class LookupServer:
    """Answers lookups from ``backend`` on ``path`` in a background thread until
    ``close``. A malformed frame gets an error reply; the server keeps serving."""

    def __init__(
        self,
        path: str,
        engine_id: str,
        backend: LookupClient,
        refuse_live_path: bool = True,
    ):
        import zmq

        self.path = path
        self.engine_id = engine_id
        self._backend = backend
        self._ctx = zmq.Context()
        if refuse_live_path and path_is_live(path, self._ctx):
            self._ctx.term()
            raise EngineIdentityConflict(path, engine_id)
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(f"ipc://{path}")
        self._inode = os.stat(path).st_ino
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.errors = 0
        self._thread = threading.Thread(target=self._serve, name=f"lookup-{engine_id}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(20):
                continue
            frame = self._sock.recv()
            try:
                query = _decode_query(frame)
                with self._lock:
                    result = self._backend.lookup(query)
                reply = {"kv_hit": result.kv_hit, "states": list(result.state_positions)}
            except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
                self.errors += 1
                reply = {"error": f"malformed lookup frame: {exc}"}
            self._sock.send(json.dumps(reply).encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        self._ctx.term()
        # Remove the socket file only if it is still ours: a server that (legacy,
        # without the live-path check) re-bound the path owns the file now.
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass


class ZmqLookupClient:
    """The scheduler side: a REQ socket connected to the engine's lookup path."""

    def __init__(self, path: str, timeout_s: float = 5.0):
        import zmq

        self.path = path
        self._timeout_ms = int(timeout_s * 1000)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REQ)
        self._sock.setsockopt(zmq.LINGER, 0)
        # After a timed-out lookup the socket may send again; a late reply to the old
        # request is told apart and dropped.
        self._sock.setsockopt(zmq.REQ_RELAXED, 1)
        self._sock.setsockopt(zmq.REQ_CORRELATE, 1)
        self._sock.connect(f"ipc://{path}")

    def lookup(self, query: LookupQuery) -> LookupResult:
        self._sock.send(_encode_query(query))
        if not self._sock.poll(self._timeout_ms):
            raise TimeoutError(f"lookup server on {self.path} did not answer")
        reply = json.loads(self._sock.recv())
        if "error" in reply:
            raise ValueError(reply["error"])
        return LookupResult(int(reply["kv_hit"]), tuple(int(p) for p in reply["states"]))

    def close(self) -> None:
        self._sock.close()
        self._ctx.term()
