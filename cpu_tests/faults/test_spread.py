"""The campaign over xdist workers and gateways, and in a budget (faults/campaign/xdist.py and session.py,
``kvfault run -n/--tx/--budget``), run for real."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from itertools import count
from pathlib import Path

import pytest

from kvfault.faults.campaign import fault_target, scenario_target
from kvfault.faults.campaign.session import run_campaign, seeds_ran

SELECTION = [
    "--seeds", "2", "--regression", "hybrid_last_chunk", "--fault", "fence_failure",
    "--scenario", "two_servers", "--no-progress",
]  # fmt: skip


def kvfault(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # One hash seed for every process of both runs: a run's trace may not depend on it,
    # but the comparison should not rest on that.
    env = dict(os.environ, PYTHONHASHSEED="0")
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=300,
    )  # fmt: skip


def table(stdout: str) -> list[list[str]]:
    """The results table's rows without the wall-time column."""
    rows = []
    for line in stdout.splitlines():
        if line.startswith(("regression ", "fault ", "scenario ", "swarm ")):
            cols = re.split(r"\s{2,}", line)
            rows.append(cols[:7] + cols[8:])
    return rows


def cases(report: Path) -> list[tuple[str, str, str]]:
    summary = json.loads((report / "summary.json").read_text())
    return [(c["id"], c["verdict"], c["digest"]) for c in summary["cases"]]


def test_two_popen_gateways_give_what_one_process_gives(tmp_path):
    one = kvfault("run", *SELECTION, "--report", "one", cwd=tmp_path)
    spread = kvfault("run", *SELECTION, "--tx", "popen", "--tx", "popen", "--report", "tx", cwd=tmp_path)  # fmt: skip
    assert one.returncode == 0, one.stdout + one.stderr
    assert spread.returncode == 0, spread.stdout + spread.stderr
    assert len(table(one.stdout)) == 3 and table(spread.stdout) == table(one.stdout)
    ran = cases(tmp_path / "one")
    assert len(ran) == 6 and all(digest for _, _, digest in ran)
    assert cases(tmp_path / "tx") == ran  # same cases, verdicts and trace digests


def test_a_gateway_in_a_directory_of_its_own_gives_what_one_process_gives(tmp_path):
    """xdist treats a gateway with a ``chdir`` as it treats an ssh one (arguments that
    name paths are rewritten against the rsync roots, and ``--rsyncdir`` copies the
    tree into that directory first): the path a campaign over other hosts takes."""
    root = Path(__file__).resolve().parents[2]
    far = tmp_path / "far"
    one = kvfault("run", *SELECTION, "--report", "one", cwd=tmp_path)
    spread = kvfault(
        "run", *SELECTION, "--tx", f"popen//chdir={far}",
        *[a for d in ("kvfault", "reference", "fakes", "faults") for a in ("--rsyncdir", os.path.relpath(root / d, tmp_path))],
        "--report", "far", cwd=tmp_path,
    )  # fmt: skip
    assert spread.returncode == 0, spread.stdout + spread.stderr
    assert (far / "faults" / "fanout.py").exists()  # the tree went there first
    assert (far / "kvfault" / "faults").resolve() == (far / "faults").resolve()  # links too
    assert table(spread.stdout) == table(one.stdout)
    assert cases(tmp_path / "far") == cases(tmp_path / "one")


def test_no_workers_runs_in_this_process(tmp_path):
    plain = kvfault("run", "--scenario", "two_servers", "--no-progress", cwd=tmp_path)
    none = kvfault("run", "-n", "0", "--scenario", "two_servers", "--no-progress", cwd=tmp_path)
    assert none.returncode == 0, none.stdout + none.stderr
    assert len(table(none.stdout)) == 1 and table(none.stdout) == table(plain.stdout)


def test_a_worker_that_dies_leaves_an_error_case_and_its_artifact(tmp_path):
    # A 1 ms hang guard ends the worker in the middle of its case.
    proc = kvfault(
        "run", "-n", "1", "--seeds", "1", "--scenario", "restart_burst", "--timeout", "0.001",
        "--no-progress", "--artifacts", "arts", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # The worker noted the case as it started and that it ran past the bound: a timeout
    # (dead_worker.DeadWorker), whose replay runs under the same bound, not a crash.
    hung = "ERROR scenario:restart_burst@seed0: ran past --timeout 0.001s (its worker's stacks"
    assert hung in proc.stdout, proc.stdout + proc.stderr
    assert "--scenario restart_burst --timeout 0.001\n" in proc.stdout, proc.stdout
    assert (tmp_path / "arts" / "scenario-restart_burst-seed0.json").exists()
    # The worker's hang guard says why, with every stack, on the command's stderr.
    assert "kvfault: error: timed out: a case ran past --timeout 0.001s" in proc.stderr
    assert "most recent call first" in proc.stderr


def test_a_budget_starts_no_seed_once_spent_and_finishes_the_running_one():
    ticks = count()  # every look at the clock is one second later
    targets = [scenario_target("two_servers"), fault_target("port_zero_ids")]
    result = run_campaign(targets, range(10, 20), budget_s=2.5, clock=lambda: float(next(ticks)))
    # clock 0 at the start; seed 10 runs unasked, 11 at 1 s, 12 at 2 s, none at 3 s
    assert seeds_ran(result) == [10, 11, 12]
    assert [t.seeds for t in result.targets] == [[10, 11, 12], [10, 11, 12]]
    assert result.ok


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_kvfault_run_budget_says_how_many_seeds_ran(tmp_path, workers):
    # 10,000 restart bursts cannot fit in a second: the budget, not --seeds, ends it.
    proc = kvfault(
        "run", "--seeds", "10000", "--budget", "1s", "--scenario", "restart_burst",
        "--no-progress", "--report", "r", *workers, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"^budget 1s: (\d+) of 10000 seeds ran \((.+)\)$", proc.stdout, re.MULTILINE)
    assert m, proc.stdout
    ran = int(m.group(1))
    assert 1 <= ran < 10000  # the first seed always runs
    meta = json.loads((tmp_path / "r" / "summary.json").read_text())["meta"]
    assert meta["seeds_ran"] == ran == len(meta["seeds"])
    if workers:
        # Under -n each xdist worker takes every other seed: a worker that starts late
        # (a loaded machine) finds the budget spent and skips its seed while the other
        # worker's next seed had already started, so the seeds that ran need not be a
        # prefix; the first seed always runs, and each seed runs once.
        assert meta["seeds"][0] == 0 and meta["seeds"] == sorted(set(meta["seeds"]))
    else:
        assert meta["seeds"] == list(range(ran))  # no seed started once the budget was spent
    assert meta["seeds_requested"] == 10000 and meta["budget_seconds"] == 1.0
    assert [c["seeds"] for c in meta["campaign"]["targets"]] == [meta["seeds"]]


@pytest.mark.parametrize("workers", [[], ["-n", "2"], ["-j", "2"]])
def test_a_spent_budget_runs_the_first_seed_alone(tmp_path, workers):
    # Spent before any worker starts: only the first seed runs, whatever the backend
    # (under -n each xdist worker had run a first item of its own: seeds 0 and 2).
    proc = kvfault(
        "run", "--seeds", "100", "--budget", "0.001s", "--scenario", "two_servers",
        "--no-progress", *workers, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "budget 0.001s: 1 of 100 seeds ran (0)" in proc.stdout, proc.stdout
