"""Reports of a kvfault run: a JSON summary, JUnit XML, and replay artifacts.

Nothing here runs a case; the CLI and the campaign hand their results in.

Case records
    ``CaseReport`` is one judged case as plain data. ``CaseReport.of(x)`` accepts a
    ``CaseReport``, a campaign ``CaseOutcome`` (anything with ``as_json()`` giving the
    campaign's fields) or a runner ``CaseResult``.

JSON summary (``write_summary``), schema ``kvfault.summary/1``::

    {
      "schema": "kvfault.summary/1",
      "ok": bool,                 # every case met its expectation
      "total": int,               # number of cases
      "passed": int,              # cases with ok == true
      "failed": int,              # not ok, verdict other than ERROR
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
for ERROR); every case has ``<system-out>`` with its replay command (and artifact and
timeline paths when known).

Replay artifacts (``ReplayArtifact``): one small JSON file per case, written *before*
the case runs (``write_before_run``), so a crash or hang still leaves the command that
replays it. The file also carries the fields ``faults.repro`` reads (``kvfault_artifact``,
``target``), so ``kvfault replay FILE`` accepts it. ``hang_guard`` dumps every thread's
stack when a block runs too long, instead of leaving CI blocked without a clue.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from faults.verdicts import OK

__all__ = [
    "ARTIFACT_KINDS",
    "SUMMARY_SCHEMA",
    "CaseReport",
    "ReplayArtifact",
    "hang_guard",
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
        target = obj.get("target") or {}
        return cls(
            id=str(obj["id"]),
            kind=str(target.get("kind", "scenario")),
            name=str(target.get("name", "")),
            scenario=str(target.get("scenario", "")),
            seed=int(obj["seed"]),
            verdict=str(obj["verdict"]),
            ok=bool(obj.get("ok", obj["verdict"] in OK)),
            signature=str(obj.get("signature") or ""),
            violations=[str(v) for v in obj.get("violations", [])],
            legacy_violations=[str(v) for v in obj.get("legacy_violations", [])],
            stop=obj.get("stop"),
            legacy_stop=obj.get("legacy_stop"),
            fired=dict(obj.get("fired") or {}),
            sim_seconds=float(obj.get("sim_seconds") or 0.0),
            wall_seconds=float(obj.get("wall_seconds") or 0.0),
            digest=str(obj.get("digest") or ""),
            error=obj.get("error"),
            command=str(obj.get("command") or ""),
            plan=obj.get("plan"),
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


def summary_json(
    cases: Sequence[Any],
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary object (schema in the module doc) for ``cases``."""
    reps = _reports(cases)
    errors = sum(1 for r in reps if r.verdict == "ERROR")
    passed = sum(1 for r in reps if r.ok)
    return {
        "schema": SUMMARY_SCHEMA,
        "ok": passed == len(reps),
        "total": len(reps),
        "passed": passed,
        "failed": len(reps) - passed - errors,
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
) -> Path:
    """Write the JSON summary of ``cases`` to ``path``; returns the path."""
    obj = summary_json(cases, wall_seconds, meta)
    return _write_atomic(Path(path), json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


# -- JUnit XML -----------------------------------------------------------------------

# XML 1.0 cannot carry most control characters, even escaped; a trace message might.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _XML_BAD.sub("?", text)


def junit_tree(cases: Sequence[Any], wall_seconds: float | None = None) -> ET.ElementTree:
    """The JUnit document for ``cases`` (see the module doc)."""
    reps = _reports(cases)
    errors = sum(1 for r in reps if r.verdict == "ERROR")
    failures = sum(1 for r in reps if not r.ok and r.verdict != "ERROR")
    total_time = wall_seconds if wall_seconds is not None else sum(r.wall_seconds for r in reps)
    counts = {
        "tests": str(len(reps)),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": "0",
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


def write_junit(cases: Sequence[Any], path: str | Path, wall_seconds: float | None = None) -> Path:
    """Write JUnit XML for ``cases`` to ``path``; returns the path."""
    tree = junit_tree(cases, wall_seconds)
    body = ET.tostring(tree.getroot(), encoding="unicode")
    return _write_atomic(Path(path), '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n")


def write_reports(
    cases: Sequence[Any],
    directory: str | Path,
    wall_seconds: float | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``summary.json`` and ``junit.xml`` into ``directory`` (created if needed);
    returns ``{"summary": path, "junit": path}``."""
    d = Path(directory)
    return {
        "summary": write_summary(cases, d / "summary.json", wall_seconds, meta),
        "junit": write_junit(cases, d / "junit.xml", wall_seconds),
    }


def _write_atomic(path: Path, text: str) -> Path:
    """The file appears whole or not at all: write a sibling, flush it, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


# -- replay artifacts ----------------------------------------------------------------


@dataclass(frozen=True)
class ReplayArtifact:
    """What replays one case.

    ``kind``: ``regression`` (legacy vs fixed A/B of ``name``), ``plan`` (``scenario``
    under the fault plan ``plan``) or ``scenario`` (``scenario`` on its own).
    ``rules``: ``"fixed"`` or the name of the regression whose legacy rules ran (a
    regression artifact names itself). ``plan``: ``faults.injectors.plans.FaultPlan`` JSON.
    ``command``: the one command that replays the case (a default is derived when
    empty). ``pythonhashseed``: the PYTHONHASHSEED the case ran under, when fixed.
    """

    kind: str
    name: str
    scenario: str
    seed: int
    rules: str = "fixed"
    plan: dict[str, Any] | None = None
    command: str = ""
    pythonhashseed: str | None = None

    @classmethod
    def for_regression(cls, name: str, seed: int = 0) -> ReplayArtifact:
        """The artifact of ``kvfault repro NAME --seed SEED``."""
        from faults.regressions.legacy import REGRESSIONS

        if name not in REGRESSIONS:
            raise ValueError(f"unknown regression {name!r}; known: {', '.join(REGRESSIONS)}")
        return cls(
            "regression",
            name,
            REGRESSIONS[name].scenario,
            seed,
            rules=name,
            pythonhashseed=_hashseed(),
        )

    @property
    def file_name(self) -> str:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.kind}-{self.name}-seed{self.seed}")
        return f"{stem}.json"

    def replay_command(self, path: Path | None = None) -> str:
        """``command`` when given; else ``kvfault repro NAME --seed N`` for a regression
        and ``kvfault replay PATH`` for the rest (prefixed by PYTHONHASHSEED=... when
        the case ran under a fixed one: hash order can decide a case)."""
        if self.command:
            return self.command
        if self.kind == "regression":
            cmd = f"kvfault repro {self.name} --seed {self.seed}"
        else:
            cmd = f"kvfault replay {path if path is not None else self.file_name}"
        return f"PYTHONHASHSEED={self.pythonhashseed} {cmd}" if self.pythonhashseed else cmd

    def as_json(self, path: Path | None = None) -> dict[str, Any]:
        return {
            "kvfault_artifact": ARTIFACT_VERSION,
            "kind": self.kind,
            "name": self.name,
            "scenario": self.scenario,
            "seed": self.seed,
            "rules": self.rules,
            "regression": self.name if self.kind == "regression" else None,
            "plan": self.plan,
            "pythonhashseed": self.pythonhashseed,
            "command": self.replay_command(path),
            # The campaign's own description of the case, so `kvfault replay` reads it.
            "target": self._target(),
            "replay": f"kvfault replay {path}" if path is not None else None,
        }

    def _target(self) -> dict[str, Any] | None:
        if self.kind == "regression":
            return {
                "kind": "regression",
                "name": self.name,
                "scenario": self.scenario,
                "regression": self.name,
                "injector": None,
                "pinned": [],
            }
        if self.rules != "fixed":
            return None  # the campaign has no target for a plan under legacy rules
        if self.kind == "scenario":
            return {
                "kind": "scenario",
                "name": self.scenario,
                "scenario": self.scenario,
                "regression": None,
                "injector": None,
                "pinned": [],
            }
        # A recorded plan on a scenario is what the campaign replays as a swarm case.
        return {
            "kind": "swarm",
            "name": self.scenario,
            "scenario": self.scenario,
            "regression": None,
            "injector": None,
            "pinned": [],
        }

    def write_before_run(self, directory: str | Path) -> Path:
        """Write the artifact into ``directory`` (created if needed) and return its path.

        Call it before the case runs: the file is complete and flushed to disk when
        this returns (written to a sibling, fsynced, renamed), so a crash, a hang or a
        kill while the case runs still leaves it.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / self.file_name
        _write_atomic(path, json.dumps(self.as_json(path), indent=2, sort_keys=True) + "\n")
        with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
            fd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return path

    @classmethod
    def load(cls, path: str | Path) -> ReplayArtifact:
        """Read an artifact (this module's, or one ``faults.repro`` wrote). Raises
        ``ValueError`` with one clear line naming the file for anything malformed."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f"cannot read replay artifact {p}: {reason}") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p} is not JSON ({exc.msg} at line {exc.lineno})") from None
        try:
            return cls.from_json(obj)
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from None

    @classmethod
    def from_json(cls, obj: Any) -> ReplayArtifact:
        """Validate and build; ``ValueError`` with one line on malformed input."""
        if not isinstance(obj, dict) or "kvfault_artifact" not in obj:
            raise ValueError(
                "not a kvfault replay artifact (a JSON object with 'kvfault_artifact')"
            )
        if obj["kvfault_artifact"] != ARTIFACT_VERSION:
            raise ValueError(
                f"artifact version {obj['kvfault_artifact']!r}; this kvfault reads {ARTIFACT_VERSION}"
            )
        kind, name = obj.get("kind"), obj.get("name")
        target = obj.get("target")
        if kind is None and isinstance(target, dict):  # written by faults.repro
            tkind = target.get("kind")
            kind = {"regression": "regression", "scenario": "scenario"}.get(tkind, "plan")
            name = target.get("name")
        if kind not in ARTIFACT_KINDS:
            raise ValueError(f"'kind' must be one of {', '.join(ARTIFACT_KINDS)}, got {kind!r}")
        if not isinstance(name, str) or not name:
            raise ValueError("'name' must be a non-empty string")
        seed = obj.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"'seed' must be an integer, got {seed!r}")
        scenario = obj.get("scenario")
        if not isinstance(scenario, str):
            raise ValueError(f"'scenario' must be a scenario name, got {scenario!r}")
        rules = obj.get("rules") or (name if kind == "regression" else "fixed")
        command = obj.get("command") or ""
        if not isinstance(command, str):
            raise ValueError("'command' must be a string")
        hs = obj.get("pythonhashseed")
        plan = obj.get("plan")
        _check_names(kind, name, scenario, rules, plan)
        return cls(
            kind, name, scenario, seed, str(rules), plan, command, None if hs is None else str(hs)
        )


def _check_names(kind: str, name: str, scenario: str, rules: Any, plan: Any) -> None:
    # Imported here: reading an artifact is rare, and `kvfault list` stays cheap.
    from faults.injectors.plans import FaultPlan
    from faults.regressions.legacy import REGRESSIONS
    from faults.scenarios import SCENARIOS

    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if kind == "regression":
        if name not in REGRESSIONS:
            raise ValueError(f"unknown regression {name!r}; known: {', '.join(REGRESSIONS)}")
        if REGRESSIONS[name].scenario != scenario:
            raise ValueError(
                f"regression {name} runs on {REGRESSIONS[name].scenario}, not {scenario!r}"
            )
    if rules != "fixed" and rules not in REGRESSIONS:
        raise ValueError(f"'rules' must be 'fixed' or a regression name, got {rules!r}")
    if kind == "plan" and plan is None:
        raise ValueError("a plan artifact needs a 'plan'")
    if plan is not None:
        FaultPlan.from_json(plan)  # raises ValueError with one line


def _hashseed() -> str | None:
    value = os.environ.get("PYTHONHASHSEED")
    return value if value not in (None, "", "random") else None


# -- hangs ---------------------------------------------------------------------------


def _fd_stream() -> IO[str]:
    # faulthandler writes to a file descriptor; under pytest's capture sys.stderr has none.
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


@contextlib.contextmanager
def hang_guard(seconds: float, file: IO[str] | None = None) -> Iterator[None]:
    """If the block is still running after ``seconds``, dump every thread's stack to
    ``file`` (stderr by default) and let it go on; the dump is cancelled when the block
    exits, however it exits. ``seconds <= 0`` disables the guard.

    faulthandler keeps one such timer per process: a guard replaces any timer set
    before it (pytest's ``faulthandler_timeout`` too) and cancels it on exit.
    """
    if seconds <= 0:
        yield
        return
    faulthandler.dump_traceback_later(seconds, repeat=False, file=file or _fd_stream(), exit=False)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
