"""Older ATOM commits, each from a clone of the checkout's history (skipped without it).

- Before ATOM's 9bed95e the offload connector reported loads in
  ``finished_recving``/``failed_recving``. The tier reads the field the checkout has, so
  a healthy reuse at 9bed95e^ delivers and applies its loads (it had been judged a load
  never terminal: liveness, exactly_once).
- Before ATOM's 5d771f7 an idle engine stops polling, so the last request's save is
  reported only if its store beats that request's last steps: ``store_failure`` passed
  or failed on identical runs at 31dadf0. Its story now sends the prompt once more after
  the store landed, so a store slower than those steps (here every store waits 0.3 s)
  cannot decide the verdict."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from kvfault.faults.atom import catalog
from kvfault.faults.atom.executor import atom_executor
from kvfault.faults.atom.spec import FaultSpec
from kvfault.faults.campaign import Case, CaseRunner
from kvfault.faults.campaign.execute import run_case
from kvfault.faults.campaign.kinds import scenario_target
from kvfault.faults.verdicts import Verdict

OLD_FIELDS = "9bed95e^"  # the last commit whose offload loads come as finished_recving


IDLE_STOPS_POLLING = "31dadf0"  # before 5d771f7: an idle engine stops polling


def checkout_at(atom_src: str, rev: str, dest: Path) -> Path:
    """A clone of the checkout at ``rev`` (the test is skipped without that commit)."""
    have = subprocess.run(
        ["git", "-C", atom_src, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True, check=False,
    )  # fmt: skip
    if have.returncode != 0:
        pytest.skip(f"{atom_src} does not hold ATOM's {rev}")
    subprocess.run(["git", "clone", "-q", "--no-checkout", atom_src, str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", rev], check=True)
    return dest


def test_loads_reported_in_finished_recving_are_read(atom_src, tmp_path):
    src = checkout_at(atom_src, OLD_FIELDS, tmp_path / "ATOM")
    connector = (src / "atom/kv_transfer/offload/connector.py").read_text()
    assert "finished_recving=dl" in connector and "finished_loading" not in connector
    # Judged by what the field decides; this commit also has bugs fixed later (usage,
    # c9aad60; lookup pins, 7427e05), which history.md proves on their own.
    with atom_executor(str(src), ["liveness", "exactly_once"]) as executor:
        out = CaseRunner(keep_runs="all", executor=executor).run(
            Case(scenario_target("prefix_reuse", "atom"), 0)
        )
    assert out.verdict == Verdict.PASS, out.signature
    kinds = [e.kind.value for e in out.fixed_result.run.trace.events]
    assert kinds.count("dispatch") == 2 and kinds.count("completion_applied") == 2


def test_store_failure_does_not_race_an_idle_engine(atom_src, tmp_path):
    src = checkout_at(atom_src, IDLE_STOPS_POLLING, tmp_path / "ATOM")
    engine = (src / "atom/model_engine/engine_core.py").read_text()
    assert "has_pending_kv_work" not in engine  # the idle engine stops polling here
    row = dataclasses.replace(
        catalog.ROWS["store_failure"], faults=FaultSpec(fail_store=1, slow_save_s=0.3)
    )
    # What the race decided; this commit's usage bug (c9aad60) is proved on its own.
    with atom_executor(str(src), ["exactly_once", "resources"]) as executor:
        for _ in range(2):
            res = run_case(row.scenario, 0, injectors=lambda: [row.factory(0)],
                           executor=executor)  # fmt: skip
            assert res.fired == {"store_failure": 1}
            assert res.ok, [str(v) for v in res.violations]
