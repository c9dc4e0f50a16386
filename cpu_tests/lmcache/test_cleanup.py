"""Nothing of a server survives: not after stop, a failing test, a KeyboardInterrupt,
nor a SIGKILLed test process; and nothing listens outside loopback.

The check: the server's process (and its group), its /dev/shm segment and its
temporary directory are gone (``LMCacheServer.leftovers``, or the same checks from
outside for servers started in a child process).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvfault.faults.lmcache.server import (
    SHM_DIR,
    LMCacheNotInstalled,
    LMCacheServer,
    lmcache_available,
    sweep_stale_segments,
)

REPO = Path(__file__).resolve().parents[2]


def _gone(info: dict[str, object], limit_s: float = 30.0) -> list[str]:
    """What of a child's server is still there after ``limit_s`` (real-time net)."""
    deadline = time.monotonic() + limit_s
    while True:
        left = []
        try:
            os.killpg(int(info["pid"]), 0)  # type: ignore[arg-type]
            left.append(f"process group {info['pid']}")
        except ProcessLookupError:
            pass
        if (SHM_DIR / str(info["segment"])).exists():
            left.append(f"/dev/shm/{info['segment']}")
        if Path(str(info["tmpdir"])).exists():
            left.append(str(info["tmpdir"]))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _child(tmp_path: Path, body: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    info_path = tmp_path / "info.json"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=str(REPO), KVF_INFO=str(info_path))
    proc = subprocess.run([sys.executable, *args, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert info_path.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc, json.loads(info_path.read_text())


WRITE_INFO = """
import json, os
from kvfault.faults.lmcache import LMCacheServer
def write_info(s):
    with open(os.environ["KVF_INFO"], "w") as f:
        json.dump({"pid": s.pid, "segment": s.shm_segment, "tmpdir": str(s.tmpdir)}, f)
"""


def test_listens_on_loopback_only_and_stop_leaves_nothing() -> None:
    server = LMCacheServer(l1_size_gb=0.05).start()
    try:
        assert (SHM_DIR / server.shm_segment).exists()
        if shutil.which("ss"):
            out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            mine = [ln for ln in out.splitlines() if f"pid={server.pid}," in ln]
            assert mine, out
            assert all(" 127.0.0.1:" in ln for ln in mine), mine  # no 0.0.0.0, no *:9090
    finally:
        server.stop()
    assert server.leftovers() == []
    server.stop()  # idempotent


def test_failing_test_leaves_nothing(tmp_path: Path) -> None:
    body = (
        WRITE_INFO
        + """
import pytest
@pytest.fixture
def server():
    with LMCacheServer(l1_size_gb=0.05) as s:
        yield s
def test_fails_midway(server):
    write_info(server)
    assert False, "mid-way failure"
"""
    )
    proc, info = _child(tmp_path, body, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert proc.returncode == 1 and "mid-way failure" in proc.stdout
    assert _gone(info) == []


def test_keyboard_interrupt_leaves_nothing(tmp_path: Path) -> None:
    body = (
        WRITE_INFO
        + """
s = LMCacheServer(l1_size_gb=0.05).start()   # no with-block: atexit must clean up
write_info(s)
raise KeyboardInterrupt
"""
    )
    proc, info = _child(tmp_path, body)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert _gone(info) == []


def test_keyboard_interrupt_inside_pytest_leaves_nothing(tmp_path: Path) -> None:
    body = (
        WRITE_INFO
        + """
import pytest
@pytest.fixture(scope="session")
def server():
    with LMCacheServer(l1_size_gb=0.05) as s:
        yield s
def test_interrupted(server):
    write_info(server)
    raise KeyboardInterrupt
"""
    )
    proc, info = _child(tmp_path, body, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert proc.returncode == 2 and "KeyboardInterrupt" in proc.stdout + proc.stderr
    assert _gone(info) == []


def test_sigkilled_test_process_server_dies_and_segment_is_swept(tmp_path: Path) -> None:
    body = (
        WRITE_INFO
        + """
import signal
s = LMCacheServer(l1_size_gb=0.05).start()
write_info(s)
os.kill(os.getpid(), signal.SIGKILL)   # no finalizer, no atexit
"""
    )
    proc, info = _child(tmp_path, body)
    assert proc.returncode == -signal.SIGKILL
    left = _gone(info, limit_s=10.0)
    # The parent-death signal takes the server; the temporary directory (and the
    # segment, unless the server's resource tracker already unlinked it) stay until the
    # next sweep, which removes them because the owning pid is dead.
    assert not any(x.startswith("process") for x in left), left
    removed = sweep_stale_segments()
    # A test process running beside this one sweeps too, and may have come first.
    assert info["tmpdir"] in removed or not Path(info["tmpdir"]).exists()
    assert _gone(info, limit_s=0) == []


def test_a_base_interpreter_is_asked_apart_from_its_virtual_environment() -> None:
    """A venv's python links to its base interpreter (same real path) but the two see
    different packages: lmcache installed in the venv is not the base's."""
    base = os.path.realpath(sys.executable)
    if base == os.path.abspath(sys.executable):
        pytest.skip("these tests do not run in a virtual environment")
    probe = subprocess.run([base, "-c", "import lmcache"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{base} itself imports lmcache")
    assert lmcache_available() and lmcache_available(sys.executable)
    assert not lmcache_available(base)


def test_clear_error_without_lmcache(tmp_path: Path) -> None:
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin") or ""
    probe = subprocess.run([python, "-c", "import lmcache"], capture_output=True)
    if not python or probe.returncode == 0:
        pytest.skip("no interpreter without lmcache on this machine")
    # The hint is the README's install command (the package is not on an index).
    with pytest.raises(
        LMCacheNotInstalled, match=r"pip install -c constraints/ci.txt '\.\[lmcache\]'"
    ):
        LMCacheServer(python=python).start()


_FAILING_SERVER = """#!/bin/sh
# Answers the "is lmcache installed?" probe as the real interpreter does; the server
# itself exits 1 as it starts.
case "$1" in -c) exec {python} "$@";; esac
echo "the server failed to start" >&2
exit 1
"""


@pytest.mark.parametrize("how", ["server-exits", "interrupted"])
def test_a_session_whose_start_fails_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    import tempfile

    from kvfault.faults.lmcache.server import LMCacheServerError
    from kvfault.faults.lmcache.session import LMCacheSession

    place = tmp_path / "tmp"
    place.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(place))
    python = tmp_path / "python"
    python.write_text(_FAILING_SERVER.format(python=sys.executable))
    python.chmod(0o755)
    session = LMCacheSession(python=str(python))
    if how == "interrupted":  # Ctrl-C while the server starts
        monkeypatch.setattr(LMCacheSession, "ensure_server", _interrupt)
    with pytest.raises(KeyboardInterrupt if how == "interrupted" else LMCacheServerError):
        with session:
            pass
    assert sorted(p.name for p in place.iterdir()) == []  # no client log directory left
    assert session.leftovers() == []


def _interrupt(self: object) -> None:
    raise KeyboardInterrupt


def test_a_killed_sessions_client_directory_is_swept_by_the_next_start(tmp_path: Path) -> None:
    # SIGKILL leaves the session's client log directory; it is named for its process,
    # so a later start sees its owner gone and removes it (it had stayed for ever).
    body = (
        "import json, os, signal, sys\n"
        "from kvfault.faults.lmcache.session import LMCacheSession\n"
        "s = LMCacheSession().start()\n"
        "print(json.dumps({'logdir': s._logdir}), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    logdir = json.loads(proc.stdout.splitlines()[-1])["logdir"]
    assert Path(logdir).exists()
    removed = sweep_stale_segments()
    # A test process running beside this one sweeps too, and may have come first.
    assert logdir in removed or not Path(logdir).exists()
