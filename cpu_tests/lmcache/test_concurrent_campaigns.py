"""Two real-tier campaigns at once, and a wedged server (issue 12, item 3), with real
processes: two ``kvfault run --tier lmcache`` started together both pass (the second
waits for the first, after one line), and a server that is alive but does not answer
becomes ``LMCacheServerWedged`` with its log's tail, not a 30 s timeout per run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults.lmcache.server import LMCacheServerWedged
from faults.lmcache.session import LMCacheSession, RealTierFactory, server_answers
from reference.stack import EngineConfig

ROOT = Path(__file__).resolve().parents[2]
WAIT_LINE = "kvfault: another real-tier campaign (pid "


def _campaign(cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    cmd = [sys.executable, "-m", "faults.cli", "run", "--tier", "lmcache", "--seeds", "1"]
    cmd += ["--fault", "wire_delay_short", "--no-progress"]
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_two_real_tier_campaigns_at_once_both_pass(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    runs = [_campaign(tmp_path / "a"), _campaign(tmp_path / "b")]
    results = [p.communicate(timeout=540) for p in runs]
    for p, (out, err) in zip(runs, results, strict=True):
        assert p.returncode == 0, out + err
        assert "1 targets, 1 runs: 1 ok, 0 failed" in out
        assert "LMCache INFO" not in err  # lmcache's client lines go to the server log
    waits = [line for _, err in results for line in err.splitlines() if line.startswith(WAIT_LINE)]
    assert len(waits) == 1, [err for _, err in results]
    assert str(runs[0].pid) in waits[0] or str(runs[1].pid) in waits[0]


def test_a_wedged_server_is_a_named_error_with_its_log_tail():
    with LMCacheSession(connect_timeout_s=2.0) as session:
        server = session.server
        assert server is not None and server_answers(server.url, 5.0)
        server.pause()  # alive, not answering (SIGSTOP)
        try:
            factory = RealTierFactory(session)
            with pytest.raises(LMCacheServerWedged) as info:
                factory(None, EngineConfig())  # type: ignore[arg-type]
        finally:
            server.resume()
        message = str(info.value)
        assert f"lmcache server pid {server.pid} at {server.url} is alive (state T)" in message
        assert "server log tail:" in message and "LMCache" in message
        # The wedged server was retired: the next run gets a fresh, answering one.
        assert not server.alive()
        fresh = session.ensure_server()
        assert fresh is not server and server_answers(fresh.url, 10.0)
