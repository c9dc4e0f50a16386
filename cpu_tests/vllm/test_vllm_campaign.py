"""``kvfault run --tier vllm`` as a user runs it: the one campaign loop's table, exit
code, report and replay commands, at vLLM 0.32.0 + LMCache 0.5.6 (docs/vllm/tier.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "prefix_reuse": "PASS",
    "cross_seed_reuse": "PASS",
    "two_servers": "PASS",
    "two_pictures": "PASS",  # LMCache's MP connector keys each picture (tier.md)
    "slow_first_forward": "PASS",
    "invalid_blocks_recompute": "PASS",
    "lost_completion": "FAIL",  # contract row: no bound on WAITING_FOR_REMOTE_KVS (findings.md 4)
    "duplicated_completion": "FAIL",  # robustness row (findings.md 1)
    "stale_completion": "FAIL",  # robustness row (findings.md 1)
    "invalid_blocks_fail": "FAIL",  # findings.md 2
    "abort_while_loading": "FAIL",  # findings.md 3
    "abort_load_same_step": "FAIL",  # findings.md 3, the same-step case
    "abort_in_load_step": "FAIL",  # findings.md 3, an abort applied in the load's step
    "preempt_after_load": "PASS",
}


def _kvfault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "vllm", "--no-progress", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )  # fmt: skip


def test_the_campaign_table_says_what_vllm_does(tmp_path) -> None:
    run = _kvfault("--report", str(tmp_path))
    assert run.returncode == 1, run.stdout + run.stderr
    verdicts = {}
    for line in run.stdout.splitlines():
        cols = line.split()
        if len(cols) > 5 and cols[0] in ("scenario", "fault"):
            verdicts[cols[1]] = cols[5]
    assert verdicts == EXPECTED, run.stdout
    assert "kvfault run --tier vllm --first-seed 0 --seeds 1 --fault abort_while_loading" in (
        run.stdout
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary and (tmp_path / "junit.xml").exists()


def test_the_guard_makes_a_crashing_row_pass() -> None:
    run = _kvfault("--fault", "invalid_blocks_fail", "--vllm-fix", "on")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS" in run.stdout
