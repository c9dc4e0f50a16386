"""Reports of a kvfault run: a JSON summary, JUnit XML, and replay artifacts.

Nothing here runs a case; the CLI and the campaign hand their results in.

Case records
    ``CaseReport`` is one judged case as plain data. ``CaseReport.of(x)`` accepts a
    ``CaseReport``, a campaign ``CaseOutcome`` (anything with ``as_json()`` giving the
    campaign's fields) or a runner ``CaseResult``.

JSON summary (``write_summary``), schema ``kvfault.summary/1``::

    {
      "schema": "kvfault.summary/1",
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
          "kind": str,            # regression | fault | scenario | swarm | plan
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
          "violations": [str],    # the fixed (or only) run's violations, one line each
          "legacy_violations": [str],  # a regression's legacy run (its expected failure)
          "stop": str | null,     # the named error the fixed (or only) run stopped with
          "legacy_stop": str | null,
          "fired": {injector: int},
          "sim_seconds": float,
          "wall_seconds": float,
          "digest": str,          # trace digest of the fixed (or only) run
          "error": str | null,    # traceback text for ERROR
          "command": str,         # the one command that replays the case
          "plan": object | null,  # the fault plan (faults.injectors.plans.FaultPlan JSON)
          "artifact": str | null, # path of the case's replay artifact
          "timeline": str | null  # path of the case's timeline picture
        }
      ]
    }

JUnit XML (``write_junit``): one ``<testsuite name="kvfault">`` inside ``<testsuites>``;
one ``<testcase classname=SCENARIO name=CASE_ID time=WALL>`` per case; a case that is not
ok has ``<failure type=VERDICT message=SIGNATURE>`` listing its violations (``<error>``
for ERROR; ``<skipped>`` for a tolerated one); every case has ``<system-out>`` with its
replay command (and artifact and timeline paths when known). Each campaign failure is
one more ``<testcase classname="kvfault.campaign" name="campaign:KIND">`` with its
``<failure>`` (``<error>`` when its verdict exits 2). So failures + errors is 0 exactly
when the run exits 0, as ``summary.json``'s ``ok`` is true.

Both take the verdict from ``campaign`` (a ``faults.campaign.CampaignResult``) when
given, the one the table's footer and the exit status read; without it, from the
cases alone.

Replay artifacts are ``faults.campaign.artifacts``; the hang guard is
``faults.campaign.hang_guard``.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from faults.verdicts import OK, Verdict, exit_code, worst

__all__ = [
    "ARTIFACT_KINDS",
    "SUMMARY_SCHEMA",
    "CaseReport",
    "summary_json",
    "write_junit",
    "write_reports",
    "write_summary",
]

SUMMARY_SCHEMA = "kvfault.summary/1"
ARTIFACT_VERSION = 1
ARTIFACT_KINDS = ("regression", "plan", "scenario")


# -- case records --------------------------------------------------------------------


@dataclass
class CaseReport:
    """One judged case, as the summary and JUnit writers see it (fields: module doc)."""

    id: str
    kind: str
    name: str
    scenario: str
    seed: int
    verdict: str
    ok: bool
    tolerated: bool = False
    signature: str = ""
    violations: list[str] = field(default_factory=list)
    legacy_violations: list[str] = field(default_factory=list)
    stop: str | None = None
    legacy_stop: str | None = None
    fired: dict[str, int] = field(default_factory=dict)
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    digest: str = ""
    error: str | None = None
    command: str = ""
    plan: dict[str, Any] | None = None
    artifact: str | None = None
    timeline: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["sim_seconds"] = round(self.sim_seconds, 4)
        out["wall_seconds"] = round(self.wall_seconds, 4)
        return out

    @classmethod
    def of(cls, item: Any, **overrides: Any) -> CaseReport:
        """A report of ``item``: a ``CaseReport`` (copied), a campaign ``CaseOutcome``
        or a runner ``CaseResult``. ``overrides`` set fields afterwards (e.g.
        ``artifact=``, ``timeline=``, ``command=``)."""
        if isinstance(item, CaseReport):
            rep = cls(**{**asdict(item)})
        elif hasattr(item, "as_json") and hasattr(item, "case"):
            rep = cls._from_outcome(item.as_json())
        elif hasattr(item, "checked") and hasattr(item, "violations"):
            rep = cls._from_result(item)
        else:
            raise TypeError(
                f"cannot report a {type(item).__name__}: want a CaseReport, CaseOutcome or CaseResult"
            )
        for key, value in overrides.items():
            if not hasattr(rep, key):
                raise TypeError(f"CaseReport has no field {key!r}")
            setattr(rep, key, value)
        return rep

    @classmethod
    def _from_outcome(cls, obj: dict[str, Any]) -> CaseReport:
        # The outcome's record (``CaseOutcome.as_json``) names its fields as this class
        # does: take those as they are, and kind, name and scenario from its target.
        target = obj.get("target") or {}
        shared = {f.name: obj[f.name] for f in fields(cls) if f.name in obj}
        return cls(
            **{
                "kind": str(target.get("kind", "scenario")),
                "name": str(target.get("name", "")),
                "scenario": str(target.get("scenario", "")),
                "ok": obj["verdict"] in OK,
                **shared,
            }
        )

    @classmethod
    def _from_result(cls, res: Any) -> CaseReport:
        violations = [str(v) for v in res.violations]
        ok = not violations
        return cls(
            id=f"scenario:{res.scenario}@seed{res.seed}",
            kind="scenario",
            name=res.scenario,
            scenario=res.scenario,
            seed=int(res.seed),
            verdict="PASS" if ok else "FAIL",
            ok=ok,
            signature=""
            if ok
            else violations[0] + (f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""),
            violations=violations,
            stop=res.stop,
            fired=dict(res.fired),
            sim_seconds=float(res.sim_seconds),
            wall_seconds=float(res.wall_seconds),
            digest=str(res.digest),
            command=f"kvfault run --scenario {res.scenario} --first-seed {res.seed} --seeds 1",
        )


def _reports(cases: Sequence[Any]) -> list[CaseReport]:
    reps = [CaseReport.of(c) for c in cases]
    seen: set[str] = set()
    for r in reps:
        # JUnit consumers key results by (classname, name): a duplicate id hides a case.
        if r.id in seen:
            raise ValueError(f"duplicate case id {r.id!r} in one report")
        seen.add(r.id)
    return reps


# -- JSON summary --------------------------------------------------------------------


def _verdict(reps: Sequence[CaseReport], campaign: Any) -> tuple[str, int, list[dict[str, str]]]:
    """The run's verdict, exit status and campaign failures: the campaign's own when
    given (``faults.campaign.CampaignResult``), else the cases' that are not tolerated."""
    if campaign is not None:
        failures = [f.as_json() for f in campaign.failures]
        return str(campaign.verdict), campaign.exit_code, failures
    counted = [r.verdict for r in reps if not r.tolerated]
    return str(worst(counted) or Verdict.PASS), exit_code(counted), []


def summary_json(
    cases: Sequence[Any],
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: Any = None,
) -> dict[str, Any]:
    """The summary object (schema in the module doc) for ``cases``; the verdict is
    ``campaign``'s when given."""
    reps = _reports(cases)
    errors = sum(1 for r in reps if r.verdict == "ERROR")
    passed = sum(1 for r in reps if r.ok)
    tolerated = sum(1 for r in reps if r.tolerated and not r.ok)
    verdict, code, failures = _verdict(reps, campaign)
    return {
        "schema": SUMMARY_SCHEMA,
        "ok": code == 0,
        "verdict": verdict,
        "exit_code": code,
        "campaign_failures": failures,
        "total": len(reps),
        "passed": passed,
        "tolerated": tolerated,
        "failed": len(reps) - passed - tolerated - errors,
        "errors": errors,
        "verdicts": dict(sorted(Counter(r.verdict for r in reps).items())),
        "wall_seconds": round(
            wall_seconds if wall_seconds is not None else sum(r.wall_seconds for r in reps), 4
        ),
        "meta": dict(meta or {}),
        "cases": [r.as_json() for r in reps],
    }


def write_summary(
    cases: Sequence[Any],
    path: str | Path,
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: Any = None,
) -> Path:
    """Write the JSON summary of ``cases`` to ``path``; returns the path."""
    obj = summary_json(cases, wall_seconds, meta, campaign)
    return _write_atomic(Path(path), json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


# -- JUnit XML -----------------------------------------------------------------------

# XML 1.0 cannot carry most control characters, even escaped; a trace message might.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _XML_BAD.sub("?", text)


def junit_tree(
    cases: Sequence[Any], wall_seconds: float | None = None, campaign: Any = None
) -> ET.ElementTree:
    """The JUnit document for ``cases`` and ``campaign``'s failures (see the module doc)."""
    reps = _reports(cases)
    _, _, failures = _verdict(reps, campaign)
    bad = [r for r in reps if not r.ok and not r.tolerated]
    errors = sum(1 for r in bad if r.verdict == "ERROR") + sum(
        1 for f in failures if Verdict(f["verdict"]).exit_code == 2
    )
    total_time = wall_seconds if wall_seconds is not None else sum(r.wall_seconds for r in reps)
    counts = {
        "tests": str(len(reps) + len(failures)),
        "failures": str(len(bad) + len(failures) - errors),
        "errors": str(errors),
        "skipped": str(sum(1 for r in reps if r.tolerated and not r.ok)),
        "time": f"{total_time:.3f}",
    }
    root = ET.Element("testsuites", {"name": "kvfault", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": "kvfault", **counts})
    for r in reps:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": _xml_text(r.scenario or r.kind),
                "name": _xml_text(r.id),
                "time": f"{r.wall_seconds:.3f}",
            },
        )
        if not r.ok:
            tag = "error" if r.verdict == "ERROR" else "failure"
            tag = "skipped" if r.tolerated else tag
            message = r.signature or (r.violations[0] if r.violations else r.verdict)
            el = ET.SubElement(
                case, tag, {"type": _xml_text(r.verdict), "message": _xml_text(message)}
            )
            el.text = _xml_text(_failure_text(r))
        out = [f"replay: {r.command}"] if r.command else []
        if r.artifact:
            out.append(f"artifact: {r.artifact}")
        if r.timeline:
            out.append(f"timeline: {r.timeline}")
        if r.fired:
            out.append("fired: " + ", ".join(f"{k} x{v}" for k, v in sorted(r.fired.items())))
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
    return ET.ElementTree(root)


def _failure_text(r: CaseReport) -> str:
    lines = [f"{r.verdict}: {r.signature}" if r.signature else r.verdict]
    if r.violations:
        lines.append("violations:")
        lines += [f"  {v}" for v in r.violations]
    if r.stop:
        lines.append(f"stop: {r.stop}")
    if r.legacy_violations or r.legacy_stop:
        lines.append("legacy run:")
        lines += [f"  {v}" for v in r.legacy_violations]
        if r.legacy_stop:
            lines.append(f"  stop: {r.legacy_stop}")
    if r.error:
        lines.append(r.error.rstrip())
    lines.append(f"replay: {r.command}")
    return "\n".join(lines)


def write_junit(
    cases: Sequence[Any],
    path: str | Path,
    wall_seconds: float | None = None,
    campaign: Any = None,
) -> Path:
    """Write JUnit XML for ``cases`` (and ``campaign``'s failures) to ``path``; returns
    the path."""
    tree = junit_tree(cases, wall_seconds, campaign)
    body = ET.tostring(tree.getroot(), encoding="unicode")
    return _write_atomic(Path(path), '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n")


def write_reports(
    cases: Sequence[Any],
    directory: str | Path,
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
    campaign: Any = None,
) -> dict[str, Path]:
    """Write ``summary.json`` and ``junit.xml`` into ``directory`` (created if needed),
    both with ``campaign``'s verdict when given; returns ``{"summary": path, "junit":
    path}``."""
    d = Path(directory)
    return {
        "summary": write_summary(cases, d / "summary.json", wall_seconds, meta, campaign),
        "junit": write_junit(cases, d / "junit.xml", wall_seconds, campaign),
    }


def _write_atomic(path: Path, text: str) -> Path:
    """The file appears whole or not at all (``faults.safe_io.write_atomic``: a private
    temporary sibling, removed on failure; no link followed)."""
    from faults.safe_io import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, text)
