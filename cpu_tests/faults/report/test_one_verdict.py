"""One verdict per run: the table's footer, summary.json, junit.xml and the exit status
are read off the same ``CampaignResult`` verdict, so they agree on passing rows,
failing rows, ERROR rows, tolerated seeds, and on each campaign-level failure (an
injector a swarm enabled that never fired; a case past ``--timeout`` that ended a run
in one process)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvfault.faults import cli
from kvfault.faults.campaign import runner as campaign_runner
from kvfault.faults.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[3]
FOOTER = re.compile(r"^\d+ targets, \d+ runs: \d+ ok, \d+ failed.* in [0-9.]+s wall$", re.M)


def four(code: int, out: str, report: Path) -> dict[str, Any]:
    """The four outputs of one run, checked to agree with each other; returned for the
    caller's own checks."""
    footers = FOOTER.findall(out)
    assert len(footers) == 1, out
    footer = footers[0]
    summary = json.loads((report / "summary.json").read_text())
    suite = ET.parse(report / "junit.xml").getroot().find("testsuite")
    bad = int(suite.get("failures")) + int(suite.get("errors"))
    green = code == 0
    assert summary["exit_code"] == code and summary["ok"] is green, (code, summary)
    assert summary["meta"]["campaign"]["exit_code"] == code
    assert summary["meta"]["campaign"]["verdict"] == summary["verdict"]
    assert Verdict(summary["verdict"]).exit_code == code
    assert (bad == 0) is green, ET.tostring(suite, encoding="unicode")[:2000]
    assert (" 0 failed" in footer and "campaign failure" not in footer) is green, footer
    return {"footer": footer, "summary": summary, "suite": suite}


def _campaign_cases(suite: ET.Element) -> dict[str, tuple[str, str]]:
    out = {}
    for case in suite.findall("testcase"):
        if case.get("classname") == "kvfault.campaign":
            (result,) = list(case)
            out[case.get("name")] = (result.tag, result.get("type"))
    return out


def run(capsys, *args: str, report: str = "rep") -> tuple[int, str]:
    code = cli.main(["run", "--no-progress", "--report", report, *args])
    return code, capsys.readouterr().out


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_passing_run_is_green_in_all_four(capsys):
    code, out = run(capsys, "--seeds", "1", "--scenario", "two_images", "-j", "1")
    got = four(code, out, Path("rep"))
    assert code == 0 and got["summary"]["verdict"] == "PASS"
    assert got["summary"]["campaign_failures"] == [] and _campaign_cases(got["suite"]) == {}


def test_an_injector_a_swarm_never_fired_fails_all_four(capsys):
    """Every row passes; the campaign does not (lost_completion, pinned into every run
    of a scenario without its completions, never fires). Today's bug: the footer said
    `2 ok, 0 failed` and summary.json `"ok": true` while the command exited 1."""
    code, out = run(capsys, "--swarm", "--scenario", "two_images", "--pin", "lost_completion",
                    "--seeds", "1", "-j", "1")  # fmt: skip
    got = four(code, out, Path("rep"))
    assert code == 1
    assert got["footer"].startswith("2 targets, 2 runs: 2 ok, 0 failed, 1 campaign failure")
    assert "(NOT EXERCISED)" in got["footer"]
    assert [(f["kind"], f["verdict"]) for f in got["summary"]["campaign_failures"]] == [
        ("not_exercised", "NOT EXERCISED")
    ]
    assert "lost_completion" in got["summary"]["campaign_failures"][0]["message"]
    assert got["summary"]["passed"] == got["summary"]["total"] == 2
    assert _campaign_cases(got["suite"]) == {"campaign:not_exercised": ("failure", "NOT EXERCISED")}


def test_a_failing_row_fails_all_four(capsys, unexercised_fault):
    code, out = run(capsys, "--seeds", "1", "--fault", unexercised_fault, "-j", "1")
    got = four(code, out, Path("rep"))
    assert code == 1 and got["summary"]["verdict"] == "NOT EXERCISED"
    assert got["footer"].startswith("1 targets, 1 runs: 0 ok, 1 failed in ")
    assert got["summary"]["failed"] == 1 and _campaign_cases(got["suite"]) == {}


def test_an_error_row_is_an_error_in_all_four(capsys, monkeypatch):
    from kvfault.faults.campaign.kinds import Scenario

    real = Scenario.judge

    def judge(self, runner, case):
        if case.target.name == "two_servers":
            raise RuntimeError("planted: the runner broke")
        return real(self, runner, case)

    monkeypatch.setattr(Scenario, "judge", judge)
    code, out = run(capsys, "--seeds", "1", "--scenario", "two_servers", "--scenario",
                    "two_images", "-j", "1")  # fmt: skip
    got = four(code, out, Path("rep"))
    assert code == 2 and got["summary"]["verdict"] == "ERROR"
    assert got["summary"]["errors"] == 1 and got["suite"].get("errors") == "1"
    assert "ERROR scenario:two_servers@seed0: RuntimeError: planted: the runner broke" in out


def test_a_seed_a_regression_was_not_reproduced_on_fails_nothing_in_all_four(capsys, monkeypatch):
    """A hash-order regression is caught on some seeds only: its row is FIXED and the
    run exits 0, so the seed that missed is tolerated (JUnit: skipped), not a failure."""
    real = campaign_runner.CaseRunner.run

    def run_case(self, case):
        out = real(self, case)
        if case.seed == 1:
            out.verdict = Verdict.NOT_REPRODUCED
        return out

    monkeypatch.setattr(campaign_runner.CaseRunner, "run", run_case)
    code, out = run(capsys, "--seeds", "2", "--regression", "media_keys", "-j", "1")
    got = four(code, out, Path("rep"))
    assert code == 0 and "caught on 1/2 seeds (missed: 1)" in out
    s = got["summary"]
    assert (s["ok"], s["verdict"], s["passed"], s["tolerated"], s["failed"]) == (
        True, "PASS", 1, 1, 0
    )  # fmt: skip
    assert [c["tolerated"] for c in s["cases"]] == [False, True]
    assert got["suite"].get("skipped") == "1"


def test_a_case_past_timeout_in_one_process_is_a_campaign_failure_in_all_four(tmp_path):
    """In one process the hang guard ends the run; before it does, the table and both
    reports say which case hung and how many never ran, and the exit status is 2."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "-j", "1", "--seeds", "2", "--scenario",
         "two_images", "--scenario", "two_servers", "--timeout", "0.001", "--no-progress",
         "--report", "rep"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("kvfault: error: timed out: a case ran past --timeout 0.001s")
    got = four(proc.returncode, proc.stdout, tmp_path / "rep")
    assert got["footer"].startswith("1 targets, 1 runs: 0 ok, 1 failed, 1 campaign failure (ERROR)")
    (failure,) = got["summary"]["campaign_failures"]
    assert failure["kind"] == "timeout" and failure["verdict"] == "ERROR"
    assert failure["message"] == (
        "scenario:two_images@seed0 ran past --timeout 0.001s and ended the run: "
        "3 of 4 cases never ran"
    )
    assert _campaign_cases(got["suite"]) == {"campaign:timeout": ("error", "ERROR")}
    assert [p.name for p in (tmp_path / "rep" / "artifacts").iterdir()] == [
        "scenario-two_images-seed0.json"
    ]
