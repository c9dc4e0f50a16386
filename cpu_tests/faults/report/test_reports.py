"""Reports (faults/report/summary.py): JSON summary, JUnit XML, replay artifacts, hang guard."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from faults.campaign import Case, CaseOutcome, regression_target, run_case, swarm_target
from faults.campaign.artifacts import ArtifactError, read_artifact, write_artifact
from faults.regressions import REGRESSIONS
from faults.report.summary import (
    SUMMARY_SCHEMA,
    CaseReport,
    summary_json,
    write_junit,
    write_reports,
)

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


def _cases() -> list[CaseReport]:
    """A FIXED regression, a STILL FAILING one, a passing scenario and an ERROR."""
    reg = REGRESSIONS["load_bound_without_restart"]
    fixed = CaseReport(
        id="regression:load_bound_without_restart@seed0",
        kind="regression",
        name="load_bound_without_restart",
        scenario="restart_burst",
        seed=0,
        verdict="FIXED",
        ok=True,
        legacy_violations=[
            "no_false_stop: engine stopped (LoadNotTerminal) [load:r#3] at t=100.823s"
        ],
        legacy_stop="LoadNotTerminal: load:r#3 is still not terminal after 50.000s (load bound 40s)",
        command=f"kvfault repro {reg.name} --seed 0",
        wall_seconds=0.21,
    )
    still = CaseReport(
        id="regression:restart_all_over_fix@seed1",
        kind="regression",
        name="restart_all_over_fix",
        scenario="lost_completion_burst",
        seed=1,
        verdict="STILL FAILING",
        ok=False,
        signature="liveness: stopped 189.7s after ... [load:x#32] at t=191.787s",
        violations=[
            "liveness: stopped 189.7s after ... [load:x#32] at t=191.787s",
            "bad \x00 char <&>",
        ],
        stop="LoadNotTerminal: load:x#32",
        command="kvfault repro restart_all_over_fix --seed 1",
    )
    error = CaseReport(
        id="fault:lost_completion@seed0",
        kind="fault",
        name="lost_completion",
        scenario="lost_completion_burst",
        seed=0,
        verdict="ERROR",
        ok=False,
        signature="RuntimeError: boom",
        error="Traceback ...\nRuntimeError: boom",
        command="kvfault run --first-seed 0 --seeds 1 --fault lost_completion",
    )
    return [fixed, still, CaseReport.of(run_case("two_images", 0)), error]


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
    import faults.report.summary as mod

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


def test_case_report_of_a_campaign_outcome_shape():
    class Outcome:  # what faults.campaign.CaseOutcome.as_json() gives
        case = object()

        def as_json(self):
            return {
                "id": "regression:media_keys@seed0",
                "target": {"kind": "regression", "name": "media_keys", "scenario": "two_images"},
                "seed": 0,
                "plan": None,
                "verdict": "FIXED",
                "ok": True,
                "signature": "",
                "violations": [],
                "legacy_violations": ["correctness: ..."],
                "stop": None,
                "legacy_stop": None,
                "fired": {},
                "wall_seconds": 0.1,
                "sim_seconds": 2.0,
                "digest": "ab",
                "error": None,
                "command": "kvfault repro media_keys --seed 0",
            }

    rep = CaseReport.of(Outcome(), timeline="t.png", artifact="a.json")
    assert (rep.kind, rep.name, rep.scenario, rep.verdict, rep.ok) == (
        "regression",
        "media_keys",
        "two_images",
        "FIXED",
        True,
    )
    assert rep.timeline == "t.png" and rep.legacy_violations == ["correctness: ..."]
    with pytest.raises(TypeError):
        CaseReport.of(42)


def test_case_report_of_a_real_outcome_keeps_every_field_the_two_share():
    out = CaseOutcome(
        Case(regression_target("media_keys"), 1),
        "FIXED",
        signature="correctness: ...",
        violations=["v"],
        legacy_violations=["correctness: ..."],
        stop="s",
        legacy_stop="ls",
        fired={"slow_forward": 2},
        wall_seconds=0.25,
        sim_seconds=2.0,
        digest="ab",
        error="e",
        checked=["correctness"],
    )
    rep, obj = CaseReport.of(out).as_json(), out.as_json()
    shared = set(rep) & set(obj)
    assert shared == CASE_FIELDS - {"kind", "name", "scenario", "artifact", "timeline", "tolerated"}
    assert {k: rep[k] for k in shared} == {k: obj[k] for k in shared}
    assert (rep["kind"], rep["name"], rep["scenario"]) == ("regression", "media_keys", "two_images")


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
        from faults.campaign import Case, regression_target
        from faults.report import write_artifact

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
