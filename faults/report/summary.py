"""Reports of a kvfault run: a JSON summary, JUnit XML, and replay artifacts.

Nothing here runs a case; the CLI and the campaign hand their results in.

Each case is a campaign ``CaseOutcome`` (``kvfault.faults.campaign.outcomes``), the one record
of a case; these writers render it. Its violations are ``Violation`` objects until
here: ``summary.json`` writes them as objects, JUnit as lines of text.

JSON summary (``write_summary``), schema ``kvfault.summary/2`` (``/1`` wrote each
violation as one line of text)::

    {
      "schema": "kvfault.summary/2",
      "ok": bool,                 # the run's verdict is good: exactly when it exits 0
      "verdict": str,             # the run's one verdict: the worst of its rows' and
                                  # its campaign failures' (PASS when all are good)
      "exit_code": int,           # the exit status that verdict gives (0, 1 or 2)
      "campaign_failures": [      # what fails the campaign beyond its cases
        {"kind": str,             # not_exercised | timeout
         "verdict": str, "message": str}
      ],
      "total": int,               # number of cases
      "passed": int,              # cases with ok == true
      "tolerated": int,           # not ok, but failing nothing (see "tolerated" below)
      "failed": int,              # not ok, not tolerated, verdict other than ERROR
      "errors": int,              # verdict ERROR (the case could not run)
      "verdicts": {VERDICT: int}, # count per verdict
      "wall_seconds": float,      # the whole run (the sum of the cases when not given)
      "meta": {...},              # free-form: argv, seeds, PYTHONHASHSEED, ...
      "cases": [                  # in the order given
        {
          "id": str,              # unique case id, e.g. "regression:NAME@seed0"
          "kind": str,            # regression | fault | scenario | swarm
          "name": str,            # regression, injector or scenario name
          "scenario": str,        # the scenario the case ran
          "seed": int,
          "verdict": str,         # PASS FAIL FIXED "STILL FAILING" "NOT REPRODUCED"
                                  # "NOT EXERCISED" ERROR
          "ok": bool,
          "tolerated": bool,      # not ok, yet its target holds: a hash-order
                                  # regression not reproduced on this seed and
                                  # caught on another (JUnit: skipped)
          "signature": str,       # the failure in one line: property + evidence, and
                                  # the named error + op it stopped with; for a
                                  # regression, the legacy run's (expected) failure,
                                  # also when FIXED; "" for a plain case that passed
          "violations": [         # the fixed (or only) run's violations, as data
            {"property": str, "message": str,
             "evidence": {"op": str | null,  # the operation it names
                          "t": float | null}}  # trace seconds it showed
          ],
          "legacy_violations": [...],  # a regression's legacy run (its expected failure)
          "stop": str | null,     # the named error the fixed (or only) run stopped with
          "legacy_stop": str | null,
          "fired": {injector: int},
          "sim_seconds": float,
          "wall_seconds": float,
          "digest": str,          # trace digest of the fixed (or only) run
          "error": str | null,    # traceback text for ERROR
          "command": str,         # the one command that replays the case
          "plan": object | null,  # the fault plan (kvfault.faults.injectors.plans.FaultPlan JSON)
          "artifact": str | null, # path of the case's replay artifact
          "timeline": str | null  # path of the case's timeline picture
        }
      ]
    }

JUnit XML (``write_junit``): one ``<testsuite name="kvfault">`` inside ``<testsuites>``;
one ``<testcase classname=SCENARIO name=CASE_ID time=WALL>`` per case; a case that is not
ok has ``<failure type=VERDICT message=SIGNATURE>`` listing its violations (``<error>``
when its verdict exits 2: ERROR, NOT REPRODUCED; ``<skipped>`` for a tolerated one); every case has ``<system-out>`` with its
replay command (and artifact and timeline paths when known). Each campaign failure is
one more ``<testcase classname="kvfault.campaign" name="campaign:KIND">`` with its
``<failure>`` (``<error>`` when its verdict exits 2). So failures + errors is 0 exactly
when the run exits 0, as ``summary.json``'s ``ok`` is true.

Both take the verdict from ``campaign`` (a ``kvfault.faults.campaign.CampaignResult``) when
given, the one the table's footer and the exit status read, and whether a case is
tolerated; without it, from the cases alone. ``artifacts`` and ``timelines`` map a
case id to the path of its replay artifact and timeline picture, where written.

Replay artifacts are ``kvfault.faults.campaign.artifacts``; the hang guard is
``kvfault.faults.campaign.hang_guard``.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from kvfault.faults.campaign.artifacts import replay_command
from kvfault.faults.verdicts import Verdict, exit_code, worst

if TYPE_CHECKING:
    from kvfault.faults.campaign import CampaignResult, CaseOutcome

__all__ = [
    "SUMMARY_SCHEMA",
    "junit_tree",
    "summary_json",
    "write_junit",
    "write_reports",
    "write_summary",
]

SUMMARY_SCHEMA = "kvfault.summary/2"

Paths = Mapping[str, "str | Path"]


# -- a case, rendered ----------------------------------------------------------------


def case_json(
    case: CaseOutcome, tolerated: bool = False, artifact: Any = None, timeline: Any = None
) -> dict[str, Any]:
    """One case of ``summary.json`` (fields: module doc), rendered from its record."""
    target = case.case.target
    return {
        "id": case.case.id,
        "kind": target.kind.name,
        "name": target.name,
        "scenario": target.scenario,
        "seed": case.case.seed,
        "verdict": str(case.verdict),
        "ok": case.ok,
        "tolerated": tolerated,
        "signature": case.signature,
        "violations": [v.as_json() for v in case.violations],
        "legacy_violations": [v.as_json() for v in case.legacy_violations],
        "stop": case.stop,
        "legacy_stop": case.legacy_stop,
        "fired": dict(case.fired),
        "sim_seconds": round(case.sim_seconds, 4),
        "wall_seconds": round(case.wall_seconds, 4),
        "digest": case.digest,
        "error": case.error,
        "command": replay_command(case.case, case.timeout_s),
        "plan": case.plan_json(),
        "artifact": None if artifact is None else str(artifact),
        "timeline": None if timeline is None else str(timeline),
    }


def _rendered(
    cases: Sequence[CaseOutcome],
    campaign: CampaignResult | None,
    artifacts: Paths | None,
    timelines: Paths | None,
) -> list[tuple[CaseOutcome, dict[str, Any]]]:
    out = []
    seen: set[str] = set()
    for c in cases:
        cid = c.case.id
        # JUnit consumers key results by (classname, name): a duplicate id hides a case.
        if cid in seen:
            raise ValueError(f"duplicate case id {cid!r} in one report")
        seen.add(cid)
        tolerated = campaign.tolerated(c) if campaign is not None else False
        row = case_json(c, tolerated, (artifacts or {}).get(cid), (timelines or {}).get(cid))
        out.append((c, row))
    return out


# -- JSON summary --------------------------------------------------------------------


def _verdict(
    rows: Sequence[dict[str, Any]], campaign: CampaignResult | None
) -> tuple[str, int, list[dict[str, str]]]:
    """The run's verdict, exit status and campaign failures: the campaign's own when
    given (``kvfault.faults.campaign.CampaignResult``), else the cases' that are not tolerated."""
    if campaign is not None:
        failures = [f.as_json() for f in campaign.failures]
        return str(campaign.verdict), campaign.exit_code, failures
    counted = [r["verdict"] for r in rows if not r["tolerated"]]
    return str(worst(counted) or Verdict.PASS), exit_code(counted), []


def summary_json(
    cases: Sequence[CaseOutcome],
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: CampaignResult | None = None,
    *,
    artifacts: Paths | None = None,
    timelines: Paths | None = None,
) -> dict[str, Any]:
    """The summary object (schema in the module doc) for ``cases``; the verdict is
    ``campaign``'s when given."""
    rows = [row for _, row in _rendered(cases, campaign, artifacts, timelines)]
    errors = sum(1 for r in rows if r["verdict"] == "ERROR")
    passed = sum(1 for r in rows if r["ok"])
    tolerated = sum(1 for r in rows if r["tolerated"] and not r["ok"])
    verdict, code, failures = _verdict(rows, campaign)
    wall = wall_seconds if wall_seconds is not None else sum(r["wall_seconds"] for r in rows)
    return {
        "schema": SUMMARY_SCHEMA,
        "ok": code == 0,
        "verdict": verdict,
        "exit_code": code,
        "campaign_failures": failures,
        "total": len(rows),
        "passed": passed,
        "tolerated": tolerated,
        "failed": len(rows) - passed - tolerated - errors,
        "errors": errors,
        "verdicts": dict(sorted(Counter(r["verdict"] for r in rows).items())),
        "wall_seconds": round(wall, 4),
        "meta": dict(meta or {}),
        "cases": rows,
    }


def write_summary(
    cases: Sequence[CaseOutcome],
    path: str | Path,
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: CampaignResult | None = None,
    *,
    artifacts: Paths | None = None,
    timelines: Paths | None = None,
) -> Path:
    """Write the JSON summary of ``cases`` to ``path``; returns the path."""
    obj = summary_json(
        cases, wall_seconds, meta, campaign, artifacts=artifacts, timelines=timelines
    )
    return _write_atomic(Path(path), json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


# -- JUnit XML -----------------------------------------------------------------------

# XML 1.0 cannot carry most control characters, even escaped; a trace message might.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _XML_BAD.sub("?", text)


def junit_tree(
    cases: Sequence[CaseOutcome],
    wall_seconds: float | None = None,
    campaign: CampaignResult | None = None,
    *,
    artifacts: Paths | None = None,
    timelines: Paths | None = None,
) -> ET.ElementTree:
    """The JUnit document for ``cases`` and ``campaign``'s failures (see the module doc)."""
    return ET.ElementTree(_junit_root(cases, wall_seconds, campaign, artifacts, timelines))


def _junit_root(
    cases: Sequence[CaseOutcome],
    wall_seconds: float | None,
    campaign: CampaignResult | None,
    artifacts: Paths | None,
    timelines: Paths | None,
) -> ET.Element:
    rendered = _rendered(cases, campaign, artifacts, timelines)
    _, _, failures = _verdict([r for _, r in rendered], campaign)
    bad = [r for _, r in rendered if not r["ok"] and not r["tolerated"]]
    # One rule for cases and campaign failures: what exits 2 (the run proved nothing:
    # ERROR, NOT REPRODUCED) is an <error>, what exits 1 a <failure>.
    errors = sum(1 for r in bad if Verdict(r["verdict"]).exit_code == 2) + sum(
        1 for f in failures if Verdict(f["verdict"]).exit_code == 2
    )
    walls = [r["wall_seconds"] for _, r in rendered]
    wall = wall_seconds if wall_seconds is not None else sum(walls)
    counts = {
        "tests": str(len(rendered) + len(failures)),
        "failures": str(len(bad) + len(failures) - errors),
        "errors": str(errors),
        "skipped": str(sum(1 for _, r in rendered if r["tolerated"] and not r["ok"])),
        "time": f"{wall:.3f}",
    }
    root = ET.Element("testsuites", {"name": "kvfault", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": "kvfault", **counts})
    for c, r in rendered:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": _xml_text(r["scenario"] or r["kind"]),
                "name": _xml_text(r["id"]),
                "time": f"{r['wall_seconds']:.3f}",
            },
        )
        if not r["ok"]:
            tag = "error" if Verdict(r["verdict"]).exit_code == 2 else "failure"
            tag = "skipped" if r["tolerated"] else tag
            message = c.signature or (str(c.violations[0]) if c.violations else r["verdict"])
            el = ET.SubElement(
                case, tag, {"type": _xml_text(r["verdict"]), "message": _xml_text(message)}
            )
            el.text = _xml_text(_failure_text(c, r["command"]))
        out = [f"replay: {r['command']}"] if r["command"] else []
        if r["artifact"]:
            out.append(f"artifact: {r['artifact']}")
        if r["timeline"]:
            out.append(f"timeline: {r['timeline']}")
        if c.fired:
            out.append("fired: " + ", ".join(f"{k} x{v}" for k, v in sorted(c.fired.items())))
        ET.SubElement(case, "system-out").text = _xml_text("\n".join(out))
    for f in failures:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "kvfault.campaign", "name": f"campaign:{f['kind']}", "time": "0.000"},
        )
        tag = "error" if Verdict(f["verdict"]).exit_code == 2 else "failure"
        el = ET.SubElement(
            case, tag, {"type": _xml_text(f["verdict"]), "message": _xml_text(f["message"])}
        )
        el.text = _xml_text(f"{f['verdict']}: {f['message']}")
    ET.indent(root)
    return root


def _failure_text(c: CaseOutcome, command: str) -> str:
    lines = [f"{c.verdict}: {c.signature}" if c.signature else str(c.verdict)]
    if c.violations:
        lines.append("violations:")
        lines += [f"  {v}" for v in c.violations]
    if c.stop:
        lines.append(f"stop: {c.stop}")
    if c.legacy_violations or c.legacy_stop:
        lines.append("legacy run:")
        lines += [f"  {v}" for v in c.legacy_violations]
        if c.legacy_stop:
            lines.append(f"  stop: {c.legacy_stop}")
    if c.error:
        lines.append(c.error.rstrip())
    lines.append(f"replay: {command}")
    return "\n".join(lines)


def write_junit(
    cases: Sequence[CaseOutcome],
    path: str | Path,
    wall_seconds: float | None = None,
    campaign: CampaignResult | None = None,
    *,
    artifacts: Paths | None = None,
    timelines: Paths | None = None,
) -> Path:
    """Write JUnit XML for ``cases`` (and ``campaign``'s failures) to ``path``; returns
    the path."""
    root = _junit_root(cases, wall_seconds, campaign, artifacts, timelines)
    body = ET.tostring(root, encoding="unicode")
    return _write_atomic(Path(path), '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n")


def write_reports(
    cases: Sequence[CaseOutcome],
    directory: str | Path,
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: CampaignResult | None = None,
    *,
    artifacts: Paths | None = None,
    timelines: Paths | None = None,
) -> dict[str, Path]:
    """Write ``summary.json`` and ``junit.xml`` into ``directory`` (created if needed),
    both with ``campaign``'s verdict when given; returns ``{"summary": path, "junit":
    path}``."""
    d = Path(directory)
    paths = {"artifacts": artifacts, "timelines": timelines}
    return {
        "summary": write_summary(cases, d / "summary.json", wall_seconds, meta, campaign, **paths),
        "junit": write_junit(cases, d / "junit.xml", wall_seconds, campaign, **paths),
    }


def _write_atomic(path: Path, text: str) -> Path:
    """The file appears whole or not at all (``kvfault.faults.safe_io.write_atomic``: a private
    temporary sibling, removed on failure; no link followed)."""
    from kvfault.faults.safe_io import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, text)
