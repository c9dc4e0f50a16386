"""Ctrl-C as a terminal sends it: SIGINT to kvfault's whole process group (its warm
processes and every server process too), while a server starts and while the host
closes its servers. The campaign ends with 130 and one line, and leaves no process of
the group and nothing in ``$TMPDIR`` (no host directory, no socket). The SIGINT that
landed while the host was closing had cut ``AtomHost.close`` short before it removed
its directory (3 of 6 interrupted campaigns left one, with sockets)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

SAFETY_NET_S = 240.0  # never a timing claim: how long before the test gives up


def _group_alive(pgid: int) -> list[str]:
    out = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    return out.stdout.split()


def _starting(tmp: Path, name: str) -> Callable[[], bool]:
    """The scheduler of server ``name`` made its listening socket: the host is inside
    ``AtomHost.start`` for it."""
    return lambda: bool(list(tmp.glob(f"kvfault-atom-*/{name}")))


def _closing(tmp: Path) -> Callable[[], bool]:
    """Server A's socket came and went (its scheduler closed its listener on the host's
    ``close``) while the host's directory is still there: the host is closing."""
    seen: list[bool] = []

    def now() -> bool:
        hosts = list(tmp.glob("kvfault-atom-*"))
        there = any((h / "A-0.sock").exists() for h in hosts)
        seen.append(there)
        return any(seen) and not there and bool(hosts)

    return now


@pytest.mark.parametrize("moment", ["starting A", "starting B", "closing"])
def test_sigint_to_the_process_group_leaves_nothing(atom_src, tmp_path, moment):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "KVFAULT_ATOM_SRC": atom_src}
    cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "atom", "--scenario",
           "two_servers", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        ready = {
            "starting A": _starting(tmp, "A-0.sock"),
            "starting B": _starting(tmp, "B-1.sock"),
            "closing": _closing(tmp),
        }[moment]
        deadline = time.monotonic() + SAFETY_NET_S
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"never {moment}"
            time.sleep(0.001)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=SAFETY_NET_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "kvfault: interrupted by SIGINT", err
    deadline = time.monotonic() + 10.0  # processes the host killed are reaped by init
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_alive(proc.pid) == []
    left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
    assert left == [], left


def test_a_sigint_while_the_host_closes_lets_it_finish(atom_src, tmp_path, monkeypatch):
    """The same moment in process: SIGINT lands as the host closes its first server.
    The close runs whole, then the KeyboardInterrupt comes."""
    import tempfile

    from kvfault.faults.atom.host import AtomHost, Server, ZygotePool
    from kvfault.faults.atom.spec import ServerSpec

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Python's own Ctrl-C handler, whatever an earlier test of the session installed.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    pool = ZygotePool(atom_src)
    try:
        host = AtomHost(pool)
        host.start(ServerSpec("A"))
        close = Server.close

        def interrupted_close(self: Server) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the server closes
            time.sleep(0.05)  # the handler runs here, between bytecodes
            close(self)

        monkeypatch.setattr(Server, "close", interrupted_close)
        with pytest.raises(KeyboardInterrupt):
            host.close()
        assert not os.path.exists(host.dir)
    finally:
        pool.close()
        signal.signal(signal.SIGINT, before)
    assert [p.name for p in tmp_path.iterdir()] == []
