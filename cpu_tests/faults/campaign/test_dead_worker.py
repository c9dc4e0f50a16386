"""A worker that dies while it holds cases: one rule (faults/campaign/dead_worker.py)
says which case is blamed, how its ERROR reads (timed out or crashed) and what runs
again, and every backend with workers follows it: forked workers (``-j``),
pytest-xdist's (``-n``: one item per case, and under ``--budget`` one per seed) and
execnet gateways (``--tx``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfault.faults.campaign import scenario_target
from kvfault.faults.campaign.dead_worker import DeadWorker
from kvfault.faults.campaign.hang_guard import TIMEOUT_EXIT
from kvfault.faults.campaign.pool import can_fork
from kvfault.faults.campaign.session import Session
from kvfault.faults.campaign.targets import Case

ROOT = Path(__file__).resolve().parents[3]

A, B, C = (Case(scenario_target(name), 0) for name in ("two_servers", "two_images", "hbm_pressure"))


def test_the_running_case_is_blamed_and_the_rest_runs_again():
    dead = DeadWorker([A, B, C], running=B, exit_code=3)
    assert dead.blamed == B and dead.rest == [A, C] and not dead.timed_out
    assert dead.cause == "it exited with 3 (a crash: its stderr says why)"
    session = Session([A.target, B.target, C.target], [0])
    assert dead.settle(session) == [A, C]
    assert list(session.done) == [(B.target.id, 0)]
    lost = session.done[(B.target.id, 0)]
    assert (lost.verdict, lost.timeout_s) == ("ERROR", None)
    assert (
        lost.signature
        == "the worker running it failed: it exited with 3 (a crash: its stderr says why)"
    )


def test_a_worker_that_died_before_a_case_started_takes_its_first_case_with_it():
    # So a unit that kills every worker before it starts a case still runs out.
    dead = DeadWorker([A, B], exit_code=-9)
    assert dead.blamed == A and dead.rest == [B]
    assert dead.cause == "it was killed (a crash: its stderr says why)"
    assert not DeadWorker([A, B], exit_code=TIMEOUT_EXIT).timed_out  # no case ran: a crash
    assert DeadWorker([], exit_code=1).blamed is None


def test_a_hang_guards_exit_in_a_case_is_a_timeout_with_its_bound():
    dead = DeadWorker([A, B], running=A, exit_code=TIMEOUT_EXIT, detail="worker 'gw0' crashed")
    assert dead.timed_out
    session = Session([A.target, B.target], [0], timeout_s=7.0)
    assert dead.settle(session) == [B]
    lost = session.done[(A.target.id, 0)]
    assert lost.signature == "ran past --timeout 7s (its worker's stacks on stderr)"
    assert lost.timeout_s == 7.0
    # What the backend saw, where it has no exit status to read.
    assert DeadWorker([A], running=A, detail="worker 'gw0' crashed").cause == "worker 'gw0' crashed"


# A tier from outside kvfault (as docs/architecture.md's recipe writes one) that runs in
# workers, whose executor kills its worker on the fault toy_crash and hangs on toy_hang.
# All four rows share one scenario, so a forked worker gets them as one unit, the
# crashing ones in its middle.
DYING_TIER = """
import contextlib
import os
import time
from dataclasses import dataclass

from kvfault.faults.runs import Expect
from kvfault.faults.tiers import Executor, Row, Tier


class DyingExecutor(Executor):
    tier = "dying"
    deterministic = True

    def execute(self, scenario, ctx):
        from kvfault.faults.scenarios import SCENARIOS

        names = {i.name for i in ctx.injectors}
        if "toy_crash" in names:
            os._exit(3)
        if "toy_hang" in names:
            time.sleep(600)
        return SCENARIOS[scenario].run(ctx), {}


@contextlib.contextmanager
def open_dying():
    yield DyingExecutor()


@dataclass(frozen=True)
class ToyFault:
    name: str
    description: str
    scenario: str
    expect: Expect
    kills_server: bool = False

    def factory(self, seed):
        from kvfault.faults.injectors.catalog import INJECTORS
        from kvfault.faults.injectors.plans import FaultSpec

        info = INJECTORS["lost_completion"]
        injector = FaultSpec.of("lost_completion", **info.defaults).build(seed)
        injector.name = self.name
        return injector


class _Faults(dict):
    def __missing__(self, name):
        from kvfault.faults.injectors.catalog import INJECTORS

        expect = INJECTORS["lost_completion"].expect
        for n in ("toy_lost_completion", "toy_crash", "toy_hang"):
            self[n] = ToyFault(n, n, "lost_completion_burst", expect)
        return self[name]


FAULTS = _Faults()


def rows():
    return [
        Row("fault", "toy_lost_completion", "a lost completion", "lost_completion_burst"),
        Row("fault", "toy_crash", "kills its worker", "lost_completion_burst"),
        Row("fault", "toy_hang", "hangs its worker", "lost_completion_burst"),
        Row("scenario", "lost_completion_burst", "plain", "lost_completion_burst"),
    ]


TIER = Tier(
    name="dying",
    description="a tier whose workers die on two of its rows",
    opener="dying_tier:open_dying",
    catalog="dying_tier:rows",
    faults="dying_tier:FAULTS",
    rank=91,
    parallel=True,
)
"""


def _install(site: Path) -> None:
    info = site / "dying_tier-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dying_tier\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kvfault.tiers]\ndying = dying_tier:TIER\n")
    (site / "dying_tier.py").write_text(textwrap.dedent(DYING_TIER))


SPREADS = [
    pytest.param(["-j", "2"], id="pool", marks=pytest.mark.skipif(not can_fork(), reason="forks")),
    pytest.param(["-n", "2"], id="xdist"),
    pytest.param(["-n", "2", "--budget", "1h"], id="xdist-item-per-seed"),
    pytest.param(["--tx", "2*popen", "--budget", "1h"], id="gateways-item-per-seed"),
]


@pytest.mark.parametrize("spread", SPREADS)
def test_every_backend_blames_the_dying_case_and_runs_the_rest(
    tmp_path: Path, spread: list[str]
) -> None:
    site = tmp_path / "site"
    _install(site)
    report = tmp_path / "report"
    # The bound is far above what a row takes (well under a second) on a busy machine.
    timeout = "10"
    run = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "--tier", "dying", "--seeds", "2",
         "--no-progress", "--report", str(report), "--timeout", timeout, *spread],
        capture_output=True, text=True, cwd=site, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])},
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    cases = {
        c["id"].removeprefix("dying:"): c
        for c in json.loads((report / "summary.json").read_text())["cases"]
    }
    verdicts = {name: c["verdict"] for name, c in cases.items()}
    # The cases before and after the dying ones in their unit or item ran and passed.
    assert verdicts == {
        f"{row}@seed{seed}": verdict
        for seed in (0, 1)
        for row, verdict in [
            ("fault:toy_lost_completion", "PASS"),
            ("fault:toy_crash", "ERROR"),
            ("fault:toy_hang", "ERROR"),
            ("scenario:lost_completion_burst", "PASS"),
        ]
    }, run.stdout + run.stderr
    for seed in (0, 1):
        crash, hang = cases[f"fault:toy_crash@seed{seed}"], cases[f"fault:toy_hang@seed{seed}"]
        # A crash: what the backend saw (a forked worker's exit status, xdist's line).
        assert crash["signature"].startswith("the worker running it failed: "), crash
        if spread[0] == "-j":
            assert crash["signature"].endswith("it exited with 3 (a crash: its stderr says why)")
        assert "--timeout" not in crash["command"], crash
        # The hang guard's exit: a timeout, with the bound its replay carries.
        assert hang["signature"] == f"ran past --timeout {timeout}s (its worker's stacks on stderr)"
        assert hang["command"].endswith(f"--timeout {timeout}"), hang
