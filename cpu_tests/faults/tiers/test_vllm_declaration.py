"""The vllm tier's declaration and command-line edges, with or without vllm installed:
its list imports no vLLM, a missing vllm is one line and exit 2, and a bad
``--vllm-fix`` is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults import cli
from kvfault.faults.vllm.executor import vllm_available

ROOT = Path(__file__).resolve().parents[3]


def _kvfault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip


def test_list_says_what_runs_and_why_the_rest_does_not(capsys) -> None:
    assert cli.main(["list", "--tier", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "duplicated_completion" in out and "not on --tier vllm:" in out


def test_list_imports_no_vllm() -> None:
    # In a fresh process: in a whole-suite run the tier's own tests have imported vllm
    # into this one already (python -m pytest cpu_tests with every extra installed).
    probe = (
        "import sys; from kvfault.faults import cli; rc = cli.main(['list', '--tier', 'vllm']); "
        "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'vllm', 'torch'}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "0 []"


@pytest.mark.skipif(vllm_available(), reason="vllm is installed")
def test_without_vllm_the_tier_is_one_line_and_exit_2() -> None:
    run = _kvfault("run", "--tier", "vllm", "--no-progress")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "kvfault: error: vllm is not installed for this Python; install it with "
        "scripts/install_vllm.sh (docs/vllm/tier.md)"
    ]


def test_a_bad_vllm_fix_is_refused_in_one_line() -> None:
    run = _kvfault("run", "--tier", "vllm", "--vllm-fix", "maybe", "--no-progress")
    assert run.returncode == 2
    assert run.stderr.strip() == "kvfault: error: --vllm-fix takes on or off, got 'maybe'"
    other = _kvfault("run", "--vllm-fix", "on", "--no-progress")
    assert other.returncode == 2 and "--vllm-fix is for --tier vllm" in other.stderr
