"""Reproduce one case: ``kvfault repro NAME`` and ``kvfault replay ARTIFACT``.

A *replay artifact* is a small JSON file naming one case (target, scenario, seed,
regression or fault plan) and the one command that replays it. It is written *before*
the case runs, so a crash or a hang still leaves it behind; a hang dumps every
thread's stack (``faulthandler.dump_traceback_later``) and ends the process instead
of blocking CI.

Verdicts and exit codes (docs/design.md#planted-regressions): FIXED 0 (legacy fails with its signature
property, fixed passes); STILL FAILING 1 (the fixed stack fails); NOT REPRODUCED or
ERROR 2. A replayed non-regression case prints PASS 0, FAIL or NOT EXERCISED 1,
ERROR 2.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from faults.argtypes import MAX_SEED
from faults.campaign import CampaignError, Case, CaseOutcome, CaseRunner, Target
from faults.verdicts import Verdict

ARTIFACT_VERSION = 1
DEFAULT_ARTIFACT_DIR = Path(".kvfault") / "artifacts"
DEFAULT_TIMEOUT_S = 600.0


# Limits shared with the command line (faults.argtypes.MAX_SEED: what --seed takes); a
# hash seed is what PYTHONHASHSEED takes; an artifact is a few hundred bytes.
MAX_HASHSEED = 4294967295
MAX_ARTIFACT_BYTES = 1 << 20


class ArtifactError(ValueError):
    """A replay artifact that cannot be read or names nothing this version knows."""


def artifact_dir(explicit: Path | None = None) -> Path:
    """Where artifacts go: ``explicit``, else ``$KVFAULT_ARTIFACTS``, else
    ``.kvfault/artifacts`` under the current directory."""
    if explicit is not None:
        return explicit
    env = os.environ.get("KVFAULT_ARTIFACTS")
    return Path(env) if env else DEFAULT_ARTIFACT_DIR


def hashseed() -> str | None:
    """This process's PYTHONHASHSEED, or None when hash randomisation is random."""
    value = os.environ.get("PYTHONHASHSEED")
    return value if value not in (None, "", "random") else None


def replay_command(case: Case) -> str:
    """The case's command, prefixed with the PYTHONHASHSEED it ran under (hash order
    can matter, e.g. for the restart-numbering regression)."""
    hs = hashseed()
    return f"PYTHONHASHSEED={hs} {case.command}" if hs is not None else case.command


def artifact_json(case: Case, path: Path | None = None) -> dict[str, Any]:
    plan = case.plan()
    return {
        "kvfault_artifact": ARTIFACT_VERSION,
        "case": case.id,
        "target": case.target.as_json(),
        "scenario": case.target.scenario,
        "seed": case.seed,
        "regression": case.target.regression,
        "plan": plan.as_json() if plan is not None else None,
        "pythonhashseed": hashseed(),
        "command": replay_command(case),
        "replay": f"kvfault replay {path}" if path is not None else None,
    }


def artifact_path(case: Case, directory: Path) -> Path:
    """Where ``case``'s artifact lives in ``directory`` (one file per case)."""
    t = case.target
    at = f"-x{t.scale}" if t.scale != 1 else ""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{t.kind}-{t.name}{at}-seed{case.seed}")
    return directory / f"{stem}.json"


def write_artifact(case: Case, directory: Path) -> Path:
    """Write ``case``'s replay artifact into ``directory`` (created if needed) and
    return its path. The file appears whole or not at all (write, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = artifact_path(case, directory)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(artifact_json(case, path), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def stage_artifact(case: Case, directory: Path) -> tuple[Path, bytes | None]:
    """``write_artifact`` for a campaign case, which removes it again when the case
    passes (``drop_artifact``). Returns the path and the bytes that were there before:
    an artifact another command wrote for the same case (``kvfault repro`` printed its
    replay line to a reviewer) must outlive the campaign."""
    path = artifact_path(case, directory)
    try:
        previous: bytes | None = path.read_bytes()
    except OSError:
        previous = None
    return write_artifact(case, directory), previous


def drop_artifact(path: Path, previous: bytes | None) -> None:
    """Undo ``stage_artifact`` after a pass: remove the file, or put back what was
    there before."""
    if previous is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(previous)
    os.replace(tmp, path)


def read_artifact(path: Path) -> tuple[Case, dict[str, Any]]:
    """Read an artifact back into the case it names; raises ``ArtifactError`` with one
    clear line for anything malformed."""
    from faults.injectors.plans import FaultPlan

    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(
            f"{path} is {len(raw)} bytes; an artifact is a few hundred (at most {MAX_ARTIFACT_BYTES})"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(
            f"{path} is not UTF-8 text (byte {exc.start}): not a replay artifact"
        ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ArtifactError(f"{path} nests JSON too deeply: not a replay artifact") from None
    if not isinstance(obj, dict) or "kvfault_artifact" not in obj:
        raise ArtifactError(
            f"{path} is not a kvfault replay artifact (no 'kvfault_artifact' field)"
        )
    if obj["kvfault_artifact"] != ARTIFACT_VERSION:
        raise ArtifactError(
            f"{path}: artifact version {obj['kvfault_artifact']!r}; this kvfault reads {ARTIFACT_VERSION}"
        )
    seed = obj.get("seed")
    # The same limits as the command line's --seed (faults.argtypes).
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ArtifactError(
            f"{path}: 'seed' must be a whole number from 0 to {MAX_SEED}, got {seed!r}"
        )
    recorded = obj.get("pythonhashseed")
    if recorded is not None and not (
        isinstance(recorded, (int, str))
        and str(recorded).isdigit()
        and int(recorded) <= MAX_HASHSEED
    ):
        raise ArtifactError(
            f"{path}: 'pythonhashseed' must be null or a whole number from 0 to "
            f"{MAX_HASHSEED} (what PYTHONHASHSEED accepts), got {recorded!r}"
        )
    try:
        target = Target.from_json(obj.get("target"))
        plan = None
        if obj.get("plan") is not None and target.kind in ("fault", "swarm"):
            plan = FaultPlan.from_json(obj["plan"])
    except (CampaignError, ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    scenario = obj.get("scenario")
    if scenario is not None and scenario != target.scenario:
        raise ArtifactError(
            f"{path}: 'scenario' is {scenario!r} but its target runs {target.scenario!r}; "
            "an artifact is replayed as written or not at all"
        )
    return Case(target, seed, recorded=plan), obj


def _stderr_fd() -> Any:
    # faulthandler writes to a file descriptor; under pytest's capture sys.stderr has none.
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


# A case that runs past --timeout is an ERROR: exit 2, like any other error.
TIMEOUT_EXIT = 2
# faulthandler's own watchdog (a C thread) backs the Python one up this much later,
# for a hang that never lets a Python thread run; it exits 1.
_BACKSTOP_S = 60.0
_guard: threading.Timer | None = None


def _timed_out(timeout_s: float) -> None:
    out = _stderr_fd()
    print(
        f"kvfault: error: timed out: a case ran past --timeout {timeout_s:g}s; "
        "every thread's stack follows",
        file=out,
        flush=True,
    )
    faulthandler.dump_traceback(file=out, all_threads=True)
    out.flush()
    os._exit(TIMEOUT_EXIT)


def arm_hang_guard(timeout_s: float | None) -> None:
    """From now on, if ``disarm_hang_guard`` is not called within ``timeout_s``, one
    line and every thread's stack go to stderr and the process exits with 2 (an
    ERROR) instead of blocking. None or 0: no guard."""
    global _guard
    disarm_hang_guard()
    if timeout_s and timeout_s > 0:
        _guard = threading.Timer(timeout_s, _timed_out, args=(timeout_s,))
        _guard.daemon = True
        _guard.start()
        faulthandler.dump_traceback_later(timeout_s + _BACKSTOP_S, exit=True, file=_stderr_fd())


def disarm_hang_guard() -> None:
    global _guard
    if _guard is not None:
        _guard.cancel()
        _guard = None
    faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def hang_guard(timeout_s: float | None) -> Iterator[None]:
    """``arm_hang_guard`` for the duration of a block."""
    arm_hang_guard(timeout_s)
    try:
        yield
    finally:
        disarm_hang_guard()


def write_timeline(outcome: CaseOutcome, path: Path) -> str | None:
    """Draw ``outcome``'s timeline picture (legacy above fixed) through
    ``faults.report.timeline``; returns why not when it cannot (None on success). The path's
    extension names the format (``faults.report.timeline.FORMATS``)."""
    try:
        from faults.report.timeline import write_timeline as draw
    except ImportError:
        return "no timeline: faults.report.timeline is not available in this version"

    def judged(result: Any) -> Any:
        return result if result is not None and getattr(result, "run", None) is not None else None

    legacy, fixed = judged(outcome.legacy_result), judged(outcome.fixed_result)
    if legacy is None and fixed is None:
        return "no timeline: the case kept no run to draw"
    try:
        draw(legacy, fixed, path, title=f"{outcome.case.id}: {outcome.verdict}")
    except Exception as exc:  # a picture must never turn a verdict into a crash
        return f"no timeline: {type(exc).__name__}: {exc}"
    return None


@dataclass
class Reproduction:
    """A case run for a reviewer, with its artifact and the line that replays it."""

    outcome: CaseOutcome
    artifact: Path | None

    @property
    def verdict(self) -> str:
        return self.outcome.verdict

    @property
    def exit_code(self) -> int:
        return Verdict(self.verdict).exit_code


def reproduce(
    case: Case,
    artifacts: Path | None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    keep_runs: str = "all",
) -> Reproduction:
    """Write ``case``'s artifact (unless ``artifacts`` is None), then run the case under
    the hang guard."""
    path = write_artifact(case, artifacts) if artifacts is not None else None
    from faults.campaign.tiers import open_executor

    with hang_guard(timeout_s), open_executor(case.target.tier) as executor:
        outcome = CaseRunner(keep_runs=keep_runs, executor=executor).run(case)
    return Reproduction(outcome, path)


def _first(items: list[str]) -> str:
    return items[0] + (f" (+{len(items) - 1} more)" if len(items) > 1 else "") if items else ""


def format_reproduction(rep: Reproduction) -> str:
    """The verdict, the failure signature and the replay command, for a terminal."""
    o, case = rep.outcome, rep.outcome.case
    t = case.target
    lines: list[str] = []
    if t.kind == "regression":
        from faults.regressions.legacy import REGRESSIONS

        reg = REGRESSIONS[t.name]
        lines.append(f"repro {t.name} (seed {case.seed}): {reg.description}")
        lines.append(f"  scenario   {t.scenario}; signature property {reg.signature}")
        if o.verdict == Verdict.ERROR:
            lines.append(f"  error      {o.signature}")
        else:
            legacy = "FAIL" if o.legacy_violations else "PASS"
            lines.append(
                f"  legacy     {legacy:4s}  {_first(o.legacy_violations) or 'every property held'}"
            )
            if o.legacy_stop:
                lines.append(f"             stop: {o.legacy_stop}")
            fixed = "FAIL" if o.violations else "PASS"
            lines.append(
                f"  fixed      {fixed:4s}  {_first(o.violations) or 'every property held'}"
            )
            if o.stop:
                lines.append(f"             stop: {o.stop}")
        meaning = {
            Verdict.FIXED: f"the legacy stack fails with {reg.signature}, the fixed stack passes",
            Verdict.STILL_FAILING: "the fixed stack fails too",
            Verdict.NOT_REPRODUCED: f"the legacy stack did not fail with {reg.signature}",
            Verdict.ERROR: "the case could not run",
        }[o.verdict]
        lines.append(f"{o.verdict}: {meaning}")
    else:
        plan = case.plan()
        faults = ", ".join(f.injector for f in plan.faults) if plan is not None else "no fault"
        lines.append(f"replay {case.id}: {t.scenario} under {faults}")
        lines.append(f"  fixed      {o.verdict}  {o.signature or _fired(o)}")
        if o.stop and o.verdict == Verdict.PASS:
            lines.append(f"             stopped correctly: {o.stop}")
        lines.append(o.verdict)
    if o.signature:
        lines.append(f"signature: {o.signature}")
    lines.append(f"replay: {replay_command(case)}")
    if rep.artifact is not None:
        lines.append(f"artifact: {rep.artifact} (kvfault replay {rep.artifact})")
    return "\n".join(lines)


def _fired(o: CaseOutcome) -> str:
    if not o.fired:
        return "every property held"
    return "every property held; fired " + ", ".join(
        f"{k} x{v}" for k, v in sorted(o.fired.items())
    )
