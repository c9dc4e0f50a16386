"""Two real-tier campaigns at once (issue 12, item 3), with real processes: two
``kvfault run --tier lmcache`` started together both pass (the second waits for the
first, after one line). A server that is alive but does not answer is replaced before
the next run, with its log's tail: ``test_no_cascade.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT_LINE = "kvfault: another real-tier campaign (pid "


def _campaign(cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONHASHSEED", None)
    cmd = [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "lmcache", "--seeds", "1"]
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
    said = [[ln for ln in err.splitlines() if ln.startswith(WAIT_LINE)] for _, err in results]
    assert all(len(w) <= 1 for w in said), said  # one line, however long the wait
    waits = [w for lines in said for w in lines]
    assert waits, "the two ran at once"
    # Another real-tier campaign on this host (the lock is the host's) may hold the
    # lock first: then both wait for it. Otherwise exactly one waits, for the other.
    ours = {str(runs[0].pid), str(runs[1].pid)}
    named = {w[len(WAIT_LINE) :].split(")")[0] for w in waits}
    if named <= ours:
        assert len(waits) == 1, said
