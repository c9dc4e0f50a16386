"""ATOM commits whose connector output carries loads in another field: before ATOM's
9bed95e the offload connector reported them in ``finished_recving``/``failed_recving``.
The tier reads the field the checkout has, so a healthy reuse at 9bed95e^ delivers and
applies its loads (it had been judged a load never terminal: liveness, exactly_once)."""

from __future__ import annotations

import subprocess

import pytest

from faults.atom.executor import atom_executor
from faults.campaign import Case, CaseRunner
from faults.campaign.kinds import scenario_target
from faults.verdicts import Verdict

OLD_FIELDS = "9bed95e^"  # the last commit whose offload loads come as finished_recving


def test_loads_reported_in_finished_recving_are_read(atom_src, tmp_path):
    have = subprocess.run(
        ["git", "-C", atom_src, "rev-parse", "--verify", "--quiet", f"{OLD_FIELDS}^{{commit}}"],
        capture_output=True, check=False,
    )  # fmt: skip
    if have.returncode != 0:
        pytest.skip(f"{atom_src} does not hold ATOM's {OLD_FIELDS}")
    src = tmp_path / "ATOM"
    subprocess.run(["git", "clone", "-q", "--no-checkout", atom_src, str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "checkout", "-q", OLD_FIELDS], check=True)
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
