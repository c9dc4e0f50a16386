"""Engine identity and the lookup channel (docs/design.md#engine-identity, docs/design.md#reliability-and-security) over real pyzmq ``ipc://``.

The rule's own functions here; its scenario (two servers on one host crossing prompts)
in test_scenarios.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import zmq

from kvfault.fakes import MemoryTier, VirtualClock
from kvfault.reference import EngineIdentityConflict, Geometry, OperationId, OpKind
from kvfault.reference.interfaces import LookupQuery, LookupResult
from kvfault.reference.rules import chunk_keys
from kvfault.reference.rules.identity import DEFAULT_PREFIX, EngineIdentity, lookup_socket_path
from kvfault.reference.stack.lookup_channel import (
    OWNER_FILE,
    LookupServer,
    ZmqLookupClient,
    path_is_live,
    private_rpc_dir,
    remove_orphan_rpc_dirs,
    remove_rpc_dir,
)

ROOT = Path(__file__).resolve().parents[3]
GEO = Geometry(16, 32, 64, 64)


# -- engine_id -----------------------------------------------------------------------


def test_engine_id_names_the_resolved_port():
    ident = EngineIdentity()
    assert ident.engine_id(35849, 0) == f"{DEFAULT_PREFIX}-r35849-dp0"
    assert ident.engine_id(34969, 3) == f"{DEFAULT_PREFIX}-r34969-dp3"
    assert EngineIdentity(prefix="atom-offload").engine_id(1, 2) == "atom-offload-r1-dp2"


@pytest.mark.parametrize("port", [0, None, -1])
def test_engine_id_without_a_resolved_port_is_the_legacy_form(port):
    assert EngineIdentity().engine_id(port, 1) == f"{DEFAULT_PREFIX}-dp1"


def test_two_servers_with_resolved_ports_never_share_a_socket():
    ident = EngineIdentity()
    paths = {
        lookup_socket_path("/run/rpc", ident.engine_id(port, rank), tp)
        for port in (35849, 34969)
        for rank in (0, 1)
        for tp in (0, 1)
    }
    assert len(paths) == 8
    # ...while without ports the two servers' rank-0 paths coincide
    assert ident.engine_id(0, 0) == ident.engine_id(0, 0)


def test_lookup_socket_path_format():
    assert lookup_socket_path("/d", "e-r1-dp0", 2) == "/d/engine_e-r1-dp0_service_lookup_rpc_port_2"
    assert lookup_socket_path("/d", "e") == "/d/engine_e_service_lookup_rpc_port_0"


def test_identity_refuses_live_paths_by_default():
    assert EngineIdentity().refuse_live_path is True


# -- the private directory -------------------------------------------------------------


def test_private_rpc_dir_is_0700_and_removed(short_tmp):
    d = private_rpc_dir()
    try:
        assert os.path.dirname(d) == str(short_tmp)
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert os.stat(d).st_uid == os.getuid()
    finally:
        remove_rpc_dir(d)
    assert not os.path.exists(d)
    remove_rpc_dir(d)  # removing twice is harmless


# -- the lookup server -----------------------------------------------------------------


@pytest.fixture
def rpc_dir(short_tmp):
    d = private_rpc_dir()
    yield d
    remove_rpc_dir(d)


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def tier():
    """A tier holding two chunks of ``range(100, 164)`` (ready at t=0)."""
    clock = VirtualClock()
    t = MemoryTier(clock, GEO, latency_s=0.0)
    ids = tuple(range(100, 164))
    ticket = t.submit_store(OperationId("s", 1, OpKind.SAVE), ids, 0, 64, list(range(4)), [])
    clock.sleep(1.0)
    assert t.poll(ticket).ok
    return t


def _path(rpc_dir: str, port: int, prefix: str = "kv") -> str:
    eid = EngineIdentity(prefix=prefix).engine_id(port, 0)
    return lookup_socket_path(rpc_dir, eid, 0)


def _raw_request(path: str, frame: bytes, timeout_ms: int = 2000) -> dict | None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"ipc://{path}")
        sock.send(frame)
        if not sock.poll(timeout_ms):
            return None
        return json.loads(sock.recv())
    finally:
        sock.close()
        ctx.term()


def test_lookup_round_trip_over_ipc(rpc_dir, tier):
    path = _path(rpc_dir, 35849)
    server = LookupServer(path, "kv-r35849-dp0", tier)
    client = ZmqLookupClient(path, timeout_s=2)
    try:
        assert os.path.exists(path)
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        hit = client.lookup(LookupQuery(tuple(range(100, 170))))
        assert hit == LookupResult(64, ())
        assert client.lookup(LookupQuery(tuple(range(100, 130)))) == LookupResult(0, ())
        miss = client.lookup(LookupQuery(tuple(range(200, 264))))
        assert miss.kv_hit == 0
        assert server.errors == 0
    finally:
        client.close()
        server.close()


def test_one_server_per_engine_answers_from_its_own_tier(rpc_dir, tier):
    """Two engines with resolved ports bind two paths; each answers from its own tier."""
    empty = MemoryTier(VirtualClock(), GEO)
    p1, p2 = _path(rpc_dir, 35849), _path(rpc_dir, 34969)
    assert p1 != p2
    s1 = LookupServer(p1, "kv-r35849-dp0", tier)
    s2 = LookupServer(p2, "kv-r34969-dp0", empty)
    c1, c2 = ZmqLookupClient(p1, 2), ZmqLookupClient(p2, 2)
    try:
        q = LookupQuery(tuple(range(100, 164)))
        assert c1.lookup(q).kv_hit == 64
        assert c2.lookup(q).kv_hit == 0
    finally:
        for x in (c1, c2, s1, s2):
            x.close()
    assert os.listdir(rpc_dir) == [OWNER_FILE]  # every socket gone


def test_rebinding_a_live_path_is_a_clear_conflict(rpc_dir, tier, zctx):
    path = _path(rpc_dir, 0)  # port unresolved: the legacy id, shared by both servers
    first = LookupServer(path, "kv-dp0", tier)
    try:
        assert path_is_live(path, zctx)
        with pytest.raises(EngineIdentityConflict) as info:
            LookupServer(path, "kv-dp0", MemoryTier(VirtualClock(), GEO))
        err = info.value
        assert err.path == path
        assert path in str(err)
        assert "kv-dp0" in str(err)
        assert "already served by a live server" in str(err)
        # the first server keeps its socket and keeps serving its own tier
        client = ZmqLookupClient(path, 2)
        try:
            assert client.lookup(LookupQuery(tuple(range(100, 164)))).kv_hit == 64
        finally:
            client.close()
    finally:
        first.close()
    assert not os.path.exists(path)


def test_a_stale_socket_file_is_not_a_live_server(rpc_dir, tier, zctx):
    path = _path(rpc_dir, 0)
    open(path, "w").close()  # left behind by a crashed server: nobody answers
    assert not path_is_live(path, zctx)
    server = LookupServer(path, "kv-dp0", tier)
    client = ZmqLookupClient(path, 2)
    try:
        assert client.lookup(LookupQuery(tuple(range(100, 164)))).kv_hit == 64
    finally:
        client.close()
        server.close()


def test_a_live_server_too_busy_to_answer_is_still_live(rpc_dir, zctx):
    """A machine under load can leave a server's thread unscheduled for a long while:
    liveness must not hang on a reply (a ping with a 200 ms deadline called such a
    server dead, and the second of two port-0 servers took its path)."""
    import zmq

    path = _path(rpc_dir, 0)
    silent = zctx.socket(zmq.REP)  # bound and listening, and never answers anything
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind(f"ipc://{path}")
    try:
        assert path_is_live(path, zctx)
        with pytest.raises(EngineIdentityConflict):
            LookupServer(path, "kv-dp0", MemoryTier(VirtualClock(), GEO))
    finally:
        silent.close()


def test_a_socket_nobody_listens_on_is_not_live(rpc_dir, zctx):
    import socket

    path = _path(rpc_dir, 0)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a crashed server's socket file: bound, never listening now
    dead.close()
    assert os.path.exists(path)
    assert not path_is_live(path, zctx)


def test_a_missing_path_is_not_live(rpc_dir, zctx):
    assert not path_is_live(os.path.join(rpc_dir, "nothing"), zctx)


MALFORMED = [
    b"garbage",
    b"\xff\xfe\x00",
    b"",
    b"[1, 2]",
    b'{"states": []}',
    b'{"ids": 5}',
    b'{"ids": ["x"]}',
    b'{"ids": [null]}',
    b'{"ids": [1], "states": 5}',
    b'{"ids": [1], "states": [[1]]}',
    json.dumps({"ids": [2**40] * 32}).encode(),  # ids outside [0, 2**32)
    json.dumps({"ids": [-1] * 32}).encode(),
    b"[" * 100_000,  # nested past the decoder's recursion limit
]


def test_a_malformed_frame_gets_an_error_reply_and_the_server_keeps_serving(rpc_dir, tier):
    path = _path(rpc_dir, 35849)
    server = LookupServer(path, "kv-r35849-dp0", tier)
    try:
        for n, frame in enumerate(MALFORMED, 1):
            reply = _raw_request(path, frame)
            assert reply is not None, f"no reply to {frame[:40]!r}: the server stopped serving"
            assert "malformed lookup frame" in reply.get("error", ""), (frame[:40], reply)
            assert server.errors == n
            # ...and a good lookup right after is still answered
            good = _raw_request(path, json.dumps({"ids": list(range(100, 164))}).encode())
            assert good == {"kv_hit": 64, "states": []}
    finally:
        server.close()


def test_client_raises_the_servers_error_and_times_out_without_a_server(rpc_dir, tier):
    path = _path(rpc_dir, 35849)
    server = LookupServer(path, "kv-r35849-dp0", tier)
    client = ZmqLookupClient(path, 2)
    try:
        with pytest.raises(ValueError, match="malformed lookup frame"):
            client.lookup(LookupQuery(("x",)))  # type: ignore[arg-type]
    finally:
        client.close()
        server.close()
    lonely = ZmqLookupClient(os.path.join(rpc_dir, "nobody"), timeout_s=0.05)
    try:
        with pytest.raises(TimeoutError, match="nobody"):
            lonely.lookup(LookupQuery((1, 2)))
    finally:
        lonely.close()


def test_state_candidates_travel_over_the_wire(rpc_dir):
    clock = VirtualClock()
    t = MemoryTier(clock, GEO, latency_s=0.0)
    ids = tuple(range(100, 164))
    ticket = t.submit_store(
        OperationId("s", 1, OpKind.SAVE), ids, 0, 64, list(range(4)), [(32, 777, "state")]
    )
    clock.sleep(1.0)
    assert t.poll(ticket).ok
    path = _path(rpc_dir, 1)
    server = LookupServer(path, "kv-r1-dp0", t)
    client = ZmqLookupClient(path, 2)
    try:
        res = client.lookup(LookupQuery(ids, ((32, 777), (48, 778))))
        assert res == LookupResult(64, (32,))
        assert len(chunk_keys(ids, 32)) == 2
    finally:
        client.close()
        server.close()


def test_nothing_is_left_behind_after_close(short_tmp, tier):
    before_threads = {t.ident for t in threading.enumerate()}
    d = private_rpc_dir()
    path = _path(d, 35849)
    server = LookupServer(path, "kv-r35849-dp0", tier)
    client = ZmqLookupClient(path, 2)
    assert client.lookup(LookupQuery(tuple(range(100, 164)))).kv_hit == 64
    client.close()
    server.close()
    assert not os.path.exists(path)
    assert os.listdir(d) == [OWNER_FILE]
    assert not server._thread.is_alive()
    assert server._ctx.closed
    remove_rpc_dir(d)
    assert os.listdir(short_tmp) == []
    assert {t.ident for t in threading.enumerate()} <= before_threads


class _Fixed:
    """A lookup backend answering a constant hit (tells servers apart)."""

    def __init__(self, hit: int):
        self.hit = hit

    def lookup(self, query: LookupQuery) -> LookupResult:
        return LookupResult(self.hit)


def test_closing_a_server_whose_path_was_taken_over_leaves_the_new_owner_reachable(rpc_dir):
    path = os.path.join(rpc_dir, "shared")
    first = LookupServer(path, "a", _Fixed(1), refuse_live_path=False)
    second = LookupServer(path, "b", _Fixed(2), refuse_live_path=False)  # legacy blind bind
    first.close()
    client = ZmqLookupClient(path, timeout_s=2.0)
    try:
        assert os.path.exists(path)
        assert client.lookup(LookupQuery((1, 2))).kv_hit == 2
    finally:
        client.close()
        second.close()
    assert not os.path.exists(path)


def test_a_lookup_client_can_ask_again_after_a_timeout(rpc_dir):
    path = os.path.join(rpc_dir, "late")
    client = ZmqLookupClient(path, timeout_s=0.2)
    try:
        with pytest.raises(TimeoutError, match="did not answer"):
            client.lookup(LookupQuery((1,)))
        server = LookupServer(path, "late", _Fixed(7))
        try:
            assert client.lookup(LookupQuery((1,))).kv_hit == 7
        finally:
            server.close()
    finally:
        client.close()


def test_the_private_rpc_dir_is_named_for_kvfault_and_leaves_room_for_every_socket(short_tmp):
    from kvfault.reference.stack.lookup_channel import (
        IPC_PATH_MAX,
        SOCKET_NAME_ROOM,
        rpc_base_budget,
    )

    d = private_rpc_dir()
    try:
        assert os.path.basename(d).startswith("kvfault-rpc-")
        assert len(os.path.basename(d)) == len("kvfault-rpc-") + 8  # mkdtemp's suffix
    finally:
        remove_rpc_dir(d)
    # the budget is the longest base that leaves SOCKET_NAME_ROOM ("/" and the socket
    # name) below <base>/kvfault-rpc-XXXXXXXX
    longest = rpc_base_budget() + 1 + len("kvfault-rpc-") + 8 + SOCKET_NAME_ROOM
    assert longest == IPC_PATH_MAX
    assert rpc_base_budget("p-") == rpc_base_budget() + len("kvfault-rpc-") - len("p-")


def test_a_server_names_its_engine_and_its_thread(rpc_dir, tier):
    server = LookupServer(_path(rpc_dir, 35849), "kv-r35849-dp0", tier)
    try:
        assert server.engine_id == "kv-r35849-dp0"
        assert "lookup-kv-r35849-dp0" in {t.name for t in threading.enumerate()}
    finally:
        server.close()
    assert "lookup-kv-r35849-dp0" not in {t.name for t in threading.enumerate()}


@pytest.fixture
def only_short_tmp(short_tmp, monkeypatch):
    """The sweep looks in the temp dir and its fallbacks (/tmp, ...): confine it to this
    test's own directory, so it neither counts nor removes other runs' directories."""
    import kvfault.reference.stack.lookup_channel as lc

    monkeypatch.setattr(lc, "_FALLBACK_BASES", ())
    return short_tmp


def test_an_orphan_rpc_dir_is_removed_and_a_live_or_unowned_one_kept(only_short_tmp):
    short_tmp = only_short_tmp
    # A process that made its directory and was killed before it could remove it.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, tempfile; tempfile.tempdir = os.environ['T'];"
            "from kvfault.reference.stack.lookup_channel import private_rpc_dir;"
            "print(private_rpc_dir(), flush=True); os._exit(9)",
        ],
        env={**os.environ, "T": str(short_tmp), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    orphan = child.stdout.strip()
    assert child.returncode == 9 and os.path.isdir(orphan), child.stderr
    live = private_rpc_dir()  # ours: this process still runs
    unowned = tempfile.mkdtemp(prefix="kvfault-rpc-", dir=short_tmp)  # being made
    try:
        assert remove_orphan_rpc_dirs() == [orphan]
        assert not os.path.exists(orphan)
        assert os.path.isdir(live) and os.path.isdir(unowned)
    finally:
        remove_rpc_dir(live)
        remove_rpc_dir(unowned)


def test_a_removal_cut_short_leaves_the_owner_file_for_the_sweep(short_tmp, monkeypatch):
    # A signal landing in remove_rpc_dir stops it part way, at whichever file; what is
    # left must still name its maker, or remove_orphan_rpc_dirs cannot tell it is garbage.
    import kvfault.reference.stack.lookup_channel as lc

    real_unlink = os.unlink
    for cut in range(3):  # cut short before the 1st, 2nd or 3rd file goes
        d = private_rpc_dir()
        for name in ("engine_a_service_lookup_rpc_port_0", "engine_b_service_lookup_rpc_port_0"):
            open(os.path.join(d, name), "w").close()
        gone = []

        def unlink(p, *, cut=cut, gone=gone, **kw):  # type: ignore[no-untyped-def]
            if len(gone) == cut:
                raise KeyboardInterrupt
            gone.append(p)
            real_unlink(p, **kw)

        monkeypatch.setattr(lc.os, "unlink", unlink)
        with pytest.raises(KeyboardInterrupt):
            remove_rpc_dir(d)
        monkeypatch.setattr(lc.os, "unlink", real_unlink)
        assert OWNER_FILE in os.listdir(d), (cut, os.listdir(d))
        remove_rpc_dir(d)
        assert not os.path.exists(d)


def test_a_stop_signal_while_the_dir_is_made_leaves_it_with_the_caller(short_tmp, monkeypatch):
    # SIGINT landing right after mkdtemp: the directory is whole (it names its maker)
    # and already in the caller's hands when the KeyboardInterrupt comes.
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        # Python runs signal handlers in the main thread only (an xdist worker may run
        # tests in another): there the signal cannot cut this thread's block at all.
        pytest.skip("a signal handler cannot interrupt a thread other than the main one")

    import kvfault.reference.stack.lookup_channel as lc

    real_mkdtemp = lc.tempfile.mkdtemp

    def mkdtemp_then_sigint(*a, **kw):  # type: ignore[no-untyped-def]
        path = real_mkdtemp(*a, **kw)
        # To this thread, now: a signal sent to the process may reach another thread
        # (this process has some) and be handled after the call has returned.
        signal.raise_signal(signal.SIGINT)
        return path

    monkeypatch.setattr(lc.tempfile, "mkdtemp", mkdtemp_then_sigint)
    made: list[str] = []
    # Python's own Ctrl-C handler, whatever an earlier test left (a worker's stop
    # handler ignores further signals once it has fired).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            private_rpc_dir(made=made)
    finally:
        signal.signal(signal.SIGINT, before)
    (d,) = made
    try:
        with open(os.path.join(d, OWNER_FILE)) as f:
            assert f.read() == str(os.getpid())
    finally:
        remove_rpc_dir(d)
    assert os.listdir(short_tmp) == []


def test_after_a_stop_an_empty_unowned_rpc_dir_goes_and_a_non_empty_one_stays(only_short_tmp):
    short_tmp = only_short_tmp
    empty = tempfile.mkdtemp(prefix="kvfault-rpc-", dir=short_tmp)  # a removal cut short
    busy = tempfile.mkdtemp(prefix="kvfault-rpc-", dir=short_tmp)
    open(os.path.join(busy, "engine_x_service_lookup_rpc_port_0"), "w").close()
    try:
        assert remove_orphan_rpc_dirs() == []  # by default no unowned one goes
        assert remove_orphan_rpc_dirs(empty_unowned=True) == [empty]
        assert not os.path.exists(empty) and os.path.isdir(busy)
    finally:
        remove_rpc_dir(busy)
        remove_rpc_dir(empty)
