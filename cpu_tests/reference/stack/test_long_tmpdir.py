"""A long ``TMPDIR`` (macOS puts it ~50 bytes deep) must not break ``ipc://`` sockets:
the private rpc directory falls back to a short temp dir (issue 12, item 1)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kvfault.reference.rules import EngineIdentity, lookup_socket_path
from kvfault.reference.stack.lookup_channel import (
    IPC_PATH_MAX,
    _rpc_base,
    private_rpc_dir,
    remove_rpc_dir,
)

ROOT = Path(__file__).resolve().parents[3]
# The depth of a macOS TMPDIR: /var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T
MACOS_LIKE = "var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T"


@pytest.fixture
def long_tmp(tmp_path_factory, monkeypatch):
    """A writable temp dir deeper than any ipc path allows, made the temp dir."""
    tmp_path_factory.getbasetemp()  # pytest's own base stays where it was
    base = Path(tempfile.mkdtemp(prefix="kvf-long-", dir="/tmp"))
    deep = base / MACOS_LIKE
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.setenv("TMPDIR", str(deep))
    yield deep
    shutil.rmtree(base, ignore_errors=True)


def test_private_rpc_dir_falls_back_to_a_short_dir_under_a_long_tmpdir(long_tmp):
    d = private_rpc_dir()
    try:
        assert not d.startswith(str(long_tmp))
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        eid = EngineIdentity().engine_id(65535, 0)
        assert len(lookup_socket_path(d, eid, 0)) <= IPC_PATH_MAX
    finally:
        remove_rpc_dir(d)


def test_the_longest_socket_binds_under_a_long_tmpdir(long_tmp):
    """A real pyzmq bind, which is what failed (ZMQError: ipc path ... longer than 107)."""
    from kvfault.reference.stack.lookup_channel import LookupServer

    class _Backend:
        def lookup(self, query):  # pragma: no cover - never asked
            raise AssertionError

    d = private_rpc_dir()
    try:
        eid = EngineIdentity().engine_id(65535, 99)
        server = LookupServer(lookup_socket_path(d, eid, 7), eid, _Backend())
        server.close()
    finally:
        remove_rpc_dir(d)


def test_no_short_writable_dir_is_one_clear_error(long_tmp, monkeypatch):
    monkeypatch.setattr("kvfault.reference.stack.lookup_channel._FALLBACK_BASES", ())
    with pytest.raises(OSError, match="set TMPDIR to a short writable directory"):
        _rpc_base("kvfault-rpc-")


def test_the_campaigns_two_server_targets_pass_under_a_long_tmpdir(long_tmp, tmp_path):
    """The four targets that open lookup sockets, as `kvfault run` runs them."""
    env = {**os.environ, "TMPDIR": str(long_tmp)}
    env.pop("PYTHONHASHSEED", None)
    out = subprocess.run(
        [
            sys.executable, "-m", "kvfault.faults.cli", "run", "--seeds", "1",
            "--scenario", "two_servers", "--scenario", "two_servers_configured",
            "--fault", "port_zero_ids", "--regression", "engine_id_without_port",
            "--report", str(tmp_path / "report"), "--artifacts", str(tmp_path / "art"),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ZMQError" not in out.stdout + out.stderr
    assert "4 targets, 4 runs: 4 ok, 0 failed" in out.stdout
