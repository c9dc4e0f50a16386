"""Reports (faults/report/summary.py): JSON summary, JUnit XML, replay artifacts, hang guard."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from kvfault.faults.campaign import (
    Case,
    CaseOutcome,
    CaseRunner,
    fault_target,
    regression_target,
    scenario_target,
    swarm_target,
)
from kvfault.faults.campaign.artifacts import ArtifactError, read_artifact, write_artifact
from kvfault.faults.campaign.reading import outcome_from_json
from kvfault.faults.properties import Violation
from kvfault.faults.report.summary import SUMMARY_SCHEMA, summary_json, write_junit, write_reports
from kvfault.faults.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[3]

CASE_FIELDS = {
    "id",
    "kind",
    "name",
    "scenario",
    "seed",
    "verdict",
    "ok",
    "tolerated",
    "signature",
    "violations",
    "legacy_violations",
    "stop",
    "legacy_stop",
    "fired",
    "sim_seconds",
    "wall_seconds",
    "digest",
    "error",
    "command",
    "plan",
    "artifact",
    "timeline",
}
TOP_FIELDS = {
    "schema",
    "ok",
    "verdict",
    "exit_code",
    "campaign_failures",
    "total",
    "passed",
    "tolerated",
    "failed",
    "errors",
    "verdicts",
    "wall_seconds",
    "meta",
    "cases",
}


@pytest.fixture(autouse=True)
def _no_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A replay line names PYTHONHASHSEED when it is set (tox sets it): these tests pin
    # the lines without it; test_repro_hashseed covers it.
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


def _cases() -> list[CaseOutcome]:
    """A FIXED regression, a STILL FAILING one, a passing scenario and an ERROR."""
    fixed = CaseOutcome(
        Case(regression_target("load_bound_without_restart"), 0),
        "FIXED",
        legacy_violations=[
            Violation("no_false_stop", "engine stopped (LoadNotTerminal)", "load:r#3", 100.823)
        ],
        legacy_stop="LoadNotTerminal: load:r#3 is still not terminal after 50.000s (load bound 40s)",
        wall_seconds=0.21,
    )
    still = CaseOutcome(
        Case(regression_target("restart_all_over_fix"), 1),
        "STILL FAILING",
        signature="liveness: stopped 189.7s after ... [load:x#32] at t=191.787s",
        violations=[
            Violation("liveness", "stopped 189.7s after ...", "load:x#32", 191.787),
            Violation("correctness", "bad \x00 char <&>"),
        ],
        stop="LoadNotTerminal: load:x#32",
    )
    error = CaseOutcome(
        Case(fault_target("lost_completion"), 0),
        "ERROR",
        signature="RuntimeError: boom",
        error="Traceback ...\nRuntimeError: boom",
    )
    plain = CaseRunner().run(Case(scenario_target("two_images"), 0))
    return [fixed, still, plain, error]


def test_summary_has_the_documented_fields(tmp_path: Path):
    paths = write_reports(_cases(), tmp_path / "report", meta={"argv": ["run"]})
    obj = json.loads(paths["summary"].read_text())
    assert set(obj) == TOP_FIELDS
    assert obj["schema"] == SUMMARY_SCHEMA
    assert (obj["total"], obj["passed"], obj["failed"], obj["errors"]) == (4, 2, 1, 1)
    assert (obj["ok"], obj["verdict"], obj["exit_code"]) == (False, "ERROR", 2)
    assert obj["campaign_failures"] == [] and obj["tolerated"] == 0
    assert obj["verdicts"] == {"ERROR": 1, "FIXED": 1, "PASS": 1, "STILL FAILING": 1}
    assert obj["meta"] == {"argv": ["run"]}
    for case in obj["cases"]:
        assert set(case) == CASE_FIELDS
        assert case["command"].startswith("kvfault ")
    scen = obj["cases"][2]
    assert scen["kind"] == "scenario" and scen["verdict"] == "PASS" and len(scen["digest"]) == 64
    # The module docstring documents every field (the reviewer doc points there).
    import kvfault.faults.report.summary as mod

    for name in CASE_FIELDS | TOP_FIELDS:
        assert f'"{name}"' in mod.__doc__, name


def test_junit_parses_with_the_right_counts(tmp_path: Path):
    path = write_junit(_cases(), tmp_path / "junit.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "kvfault"
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("4", "1", "1", "0")
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == [
        "restart_burst",
        "lost_completion_burst",
        "two_images",
        "lost_completion_burst",
    ]
    assert cases[0].get("name") == "regression:load_bound_without_restart@seed0"
    assert cases[0].find("failure") is None and cases[2].find("failure") is None
    failure = cases[1].find("failure")
    assert failure.get("type") == "STILL FAILING" and failure.get("message").startswith("liveness:")
    assert "liveness: stopped 189.7s" in failure.text and "<&>" in failure.text
    assert cases[3].find("error").get("message") == "RuntimeError: boom"
    for c in cases:
        assert c.find("system-out").text.startswith("replay: kvfault ")
        float(c.get("time"))


def test_junit_tags_what_exits_2_as_an_error_for_cases_as_for_the_campaign(tmp_path: Path):
    # NOT REPRODUCED proved nothing (exit 2), as a campaign failure that exits 2 does.
    t = regression_target("media_keys")
    case = CaseOutcome(Case(t, 0), Verdict.NOT_REPRODUCED, signature="legacy passed")
    root = ET.parse(write_junit([case], tmp_path / "junit.xml")).getroot()
    (suite,) = root.findall("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    (tc,) = suite.findall("testcase")
    assert tc.find("failure") is None
    assert tc.find("error").get("type") == "NOT REPRODUCED"


def test_junit_validates_with_junitparser(tmp_path: Path):
    junitparser = pytest.importorskip("junitparser")
    path = write_junit(_cases(), tmp_path / "junit.xml")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert len(suites) == 1 and suites[0].name == "kvfault"
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors) == (4, 1, 1)
    results = {case.name: [type(r).__name__ for r in case.result] for case in suite}
    assert results["regression:restart_all_over_fix@seed1"] == ["Failure"]
    assert results["fault:lost_completion@seed0"] == ["Error"]
    assert results["scenario:two_images@seed0"] == []
    assert all(case.system_out.startswith("replay: ") for case in suite)


def test_duplicate_case_ids_are_refused():
    c = _cases()[0]
    with pytest.raises(ValueError, match="duplicate case id"):
        summary_json([c, c])


def test_a_case_is_rendered_from_its_one_record():
    """The summary's case is its ``CaseOutcome`` rendered: every field they share says
    the same, and the case's kind, name and scenario are its target's."""
    out = CaseOutcome(
        Case(regression_target("media_keys"), 1),
        "FIXED",
        signature="correctness: ...",
        violations=[Violation("correctness", "v", "load:a#1", 2.5)],
        legacy_violations=[Violation("correctness", "differs", None, 0.25)],
        stop="s",
        legacy_stop="ls",
        fired={"slow_forward": 2},
        wall_seconds=0.25,
        sim_seconds=2.0,
        digest="ab",
        error="e",
        checked=["correctness"],
    )
    (rep,) = summary_json([out])["cases"]
    obj = out.as_json()
    shared = set(rep) & set(obj)
    assert shared == CASE_FIELDS - {"kind", "name", "scenario", "artifact", "timeline", "tolerated"}
    assert {k: rep[k] for k in shared} == {k: obj[k] for k in shared}
    assert (rep["kind"], rep["name"], rep["scenario"]) == ("regression", "media_keys", "two_images")
    # The record crosses a process boundary as JSON (-n/--tx) and comes back whole.
    back = outcome_from_json(obj)
    assert back.violations == out.violations and back.legacy_violations == out.legacy_violations


def test_a_case_s_violations_reach_summary_json_as_data_with_evidence(tmp_path: Path):
    """A real failing case (the fixed scenario on a legacy stack): its violations stay
    ``Violation`` objects in its record and reach summary.json as objects with their
    evidence (the operation and the time); JUnit prints each as its one line."""
    case = Case(replace(scenario_target("restart_burst"), stack="load_bound_without_restart"), 0)
    out = CaseRunner().run(case)
    assert out.verdict == "FAIL" and out.violations
    assert all(isinstance(v, Violation) for v in out.violations)
    paths = write_reports([out], tmp_path)
    (row,) = json.loads(paths["summary"].read_text())["cases"]
    assert row["violations"] == [v.as_json() for v in out.violations]
    first = row["violations"][0]
    assert set(first) == {"property", "message", "evidence"}
    assert first["property"] == "no_false_stop" and "LoadNotTerminal" in first["message"]
    assert first["evidence"]["op"].startswith("load:") and first["evidence"]["t"] > 0
    assert [Violation.from_json(v) for v in row["violations"]] == out.violations
    failure = ET.parse(paths["junit"]).getroot().find("testsuite/testcase/failure")
    assert all(f"  {v}" in failure.text for v in out.violations)


# -- replay artifacts (one format: faults.campaign.artifacts) ------------------------------


def test_artifact_round_trip(tmp_path: Path):
    case = Case(regression_target("restart_numbering_in_hash_order"), 3)
    path = write_artifact(case, tmp_path / "artifacts")
    assert path.name == "regression-restart_numbering_in_hash_order-seed3.json"
    back, obj = read_artifact(path)
    assert (
        back == case and obj["scenario"] == "loaded_restart_burst" and obj["kvfault_artifact"] == 1
    )
    assert obj["command"].endswith("kvfault repro restart_numbering_in_hash_order --seed 3")
    swarm = Case(swarm_target("lost_completion_burst", ("lost_completion",)), 5)
    back2, obj2 = read_artifact(write_artifact(swarm, tmp_path))
    assert back2.plan() == swarm.plan() and obj2["target"]["kind"] == "swarm"


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "not a kvfault replay artifact"),
        ('{"kvfault_artifact": 9}', "artifact version 9"),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "movie", "name": "x"}}',
            "kind must be one of",
        ),
        ('{"kvfault_artifact": 1, "seed": "0"}', "'seed' must be a whole number"),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "scenario", "name": "nope"}}',
            "unknown scenario 'nope'",
        ),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "regression", "name": "nope"}}',
            "unknown regression 'nope'",
        ),
        (
            '{"kvfault_artifact": 1, "seed": 0, "target": {"kind": "fault", "name": "lost_completion"}, "plan": {"faults": [{"injector": "nope"}]}}',
            "unknown injector",
        ),
    ],
)
def test_malformed_artifacts_give_one_clear_line(tmp_path: Path, content: str, match: str):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ArtifactError, match=match) as info:
        read_artifact(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message


def test_missing_artifact_is_one_clear_line(tmp_path: Path):
    with pytest.raises(ArtifactError, match="cannot read"):
        read_artifact(tmp_path / "absent.json")


def test_artifact_is_on_disk_before_the_case_runs(tmp_path: Path):
    """A child process writes its artifact, then dies hard inside the 'case' (os._exit,
    no cleanup, no flush of Python buffers): the artifact is there and complete."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from kvfault.faults.campaign import Case, regression_target
        from kvfault.faults.report import write_artifact

        def case():
            os._exit(86)  # a crash: nothing after this line runs

        write_artifact(Case(regression_target("load_bound_without_restart"), 0), Path({str(tmp_path)!r}))
        case()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 86, proc.stderr
    (path,) = tmp_path.glob("*.json")
    case, _ = read_artifact(path)
    assert case.target.name == "load_bound_without_restart"
    assert not list(tmp_path.glob("*.tmp"))  # no half-written sibling left behind


# -- timelines under `kvfault run --report` ---------------------------------------------

LEGACY_RUN = ["run", "--legacy", "load_bound_without_restart", "--scenario", "restart_burst",
              "--seeds", "1", "-j", "1", "--no-progress", "--report", "rp"]  # fmt: skip


def _run_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    from kvfault.faults import cli

    monkeypatch.chdir(tmp_path)
    code = cli.main(LEGACY_RUN)
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "rp" / "summary.json").read_text())
    assert [c["timeline"] for c in summary["cases"]] == [None]  # the reports still appear
    return code, err


def test_a_timeline_place_that_is_not_a_directory_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    (tmp_path / "rp").mkdir()
    (tmp_path / "rp" / "timelines").write_text("")
    code, err = _run_report(tmp_path, monkeypatch, capsys)
    assert (code, err) == (2, "kvfault: error: --report: rp/timelines: not a directory, "
                              "so no timeline can go in it\n")  # fmt: skip


def test_a_timeline_that_cannot_be_written_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    import kvfault.faults.report.timeline as timeline

    def full(legacy, fixed, path, **kw):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(timeline, "write_timeline", full)
    code, err = _run_report(tmp_path, monkeypatch, capsys)
    assert code == 2
    assert err.startswith("kvfault: error: --report: rp/timelines/") and err.endswith(
        ".svg: cannot write timeline: No space left on device\n"
    ), err


def test_without_matplotlib_there_are_no_timelines_and_the_verdict_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    import kvfault.faults.report.timeline as timeline

    def missing(legacy, fixed, path, **kw):
        raise ImportError("timeline pictures need matplotlib; install the plot extra")

    monkeypatch.setattr(timeline, "write_timeline", missing)
    code, err = _run_report(tmp_path, monkeypatch, capsys)
    assert code == 1  # the legacy stack fails: FAIL, as without --report
    assert (
        err
        == "kvfault: note: no timelines: timeline pictures need matplotlib; install the plot extra\n"
    )
    assert not (tmp_path / "rp" / "timelines").exists()  # no empty directory beside them


def test_the_same_case_on_each_tier_has_its_own_artifact(tmp_path: Path):
    # A kept artifact of one tier's case must not be overwritten by another tier's.
    from kvfault.faults.campaign.artifacts import artifact_path

    base = scenario_target("two_images")
    paths = {artifact_path(Case(replace(base, tier=t), 0), tmp_path).name
             for t in ("memory", "lmcache", "atom")}  # fmt: skip
    assert paths == {"scenario-two_images-seed0.json", "lmcache-scenario-two_images-seed0.json",
                     "atom-scenario-two_images-seed0.json"}  # fmt: skip
