"""Reproduce one case: ``kvfault repro NAME`` and ``kvfault replay ARTIFACT``.

The case's replay artifact (``kvfault.faults.campaign.artifacts``) is written *before* the case
runs, so a crash or a hang still leaves it behind; the hang guard
(``kvfault.faults.campaign.hang_guard``) ends a hung case instead of blocking CI.

Verdicts and exit codes (docs/design.md#planted-regressions): FIXED 0 (legacy fails with its signature
property, fixed passes); STILL FAILING 1 (the fixed stack fails); NOT REPRODUCED or
ERROR 2. A replayed non-regression case prints PASS 0, FAIL or NOT EXERCISED 1,
ERROR 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvfault.faults.argtypes import DEFAULT_CASE_TIMEOUT_S
from kvfault.faults.campaign import Case, CaseOutcome
from kvfault.faults.campaign.artifacts import replay_command
from kvfault.faults.campaign.kinds import kind_of
from kvfault.faults.verdicts import Verdict


def draw_timeline(outcome: CaseOutcome, path: Path) -> bool:
    """Draw ``outcome``'s timeline picture (legacy above fixed) through
    ``kvfault.faults.report.timeline`` at ``path`` (its extension names the format,
    ``kvfault.faults.report.timeline.FORMATS``); False when the case kept no run to draw.
    Raises ``ImportError`` when pictures cannot be drawn here (no matplotlib),
    ``OSError`` when the file cannot be written, and whatever drawing raised."""
    from kvfault.faults.report.timeline import write_timeline as draw

    def judged(result: Any) -> Any:
        return result if result is not None and getattr(result, "run", None) is not None else None

    legacy, fixed = judged(outcome.legacy_result), judged(outcome.fixed_result)
    if legacy is None and fixed is None:
        return False
    draw(legacy, fixed, path, title=f"{outcome.case.id}: {outcome.verdict}")
    return True


def write_timeline(outcome: CaseOutcome, path: Path) -> str | None:
    """``draw_timeline``, with why not as one line when it cannot (None on success)."""
    try:
        if not draw_timeline(outcome, path):
            return "no timeline: the case kept no run to draw"
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
    timeout_s: float | None = DEFAULT_CASE_TIMEOUT_S,
    keep_runs: str = "all",
) -> Reproduction:
    """Run ``case`` through the campaign's own loop (``kvfault.faults.campaign.session``), with
    its artifact in ``artifacts`` (None: none) kept whatever the verdict: written
    before the case runs, so a crash or a hang leaves it; a case that runs past
    ``timeout_s`` has its artifact record it. The tier opens with the target's own
    options (``--atom-src``, ``--property``), as the case ran. Interrupted (Ctrl-C, a stop signal), the
    case has no verdict: an artifact this call wrote goes again, as the campaign's does
    (one that was there before stays)."""
    from kvfault.faults.campaign.artifacts import CampaignArtifacts
    from kvfault.faults.campaign.backends import open_backend
    from kvfault.faults.campaign.session import run_session
    from kvfault.faults.tiers import Tiers

    store = CampaignArtifacts(artifacts, keep_passing=True) if artifacts is not None else None
    t = case.target
    targets, seeds = [t], [case.seed]
    options = Tiers.installed()[t.tier].opener_options(t.options)  # --atom-src, as it ran
    with open_backend(t.tier, targets, seeds, jobs=1, options=options) as backend:
        result = run_session(
            targets, seeds, backend, artifacts=store, timeout_s=timeout_s, keep_runs=keep_runs
        )
    (outcome,) = result.targets[0].cases
    return Reproduction(outcome, store.kept.get(case.id) if store is not None else None)


def wanted_hash_seed(command: str, artifact: Path | None = None) -> str | None:
    """The PYTHONHASHSEED a command must run under for its artifacts to record the hash
    order (None: any; the command needs none). ``replay``: the one ``artifact``
    recorded (else as ``repro``); ``repro``: the one this process has, else 0, so the
    same command names the same loads every time; ``run``: the one this process has,
    else a fresh random one, so campaigns still try new hash orders and record each."""
    import random

    from kvfault.faults.campaign.artifacts import ArtifactError, hashseed, read_artifact

    current = hashseed()
    if command == "replay" and artifact is not None:
        try:
            _, obj = read_artifact(artifact)
        except ArtifactError:
            return None  # the command itself says what is wrong with it
        if obj.get("pythonhashseed") is not None:
            return str(int(obj["pythonhashseed"]))
    if command in ("repro", "replay"):
        return current if current is not None else "0"
    if command == "run":
        return current if current is not None else str(random.SystemRandom().randrange(1 << 32))
    return None


def format_reproduction(rep: Reproduction) -> str:
    """The verdict, the failure signature and the replay command, for a terminal (what
    the case ran and how each side ended: its target's kind says)."""
    o, case = rep.outcome, rep.outcome.case
    lines = kind_of(case.target).reproduction(o)
    if o.signature:
        lines.append(f"signature: {o.signature}")
    from kvfault.faults.campaign.artifacts import case_code

    code = case_code(case)
    if code is not None:
        lines.append(f"code: {code.describe()}")
    lines.append(f"replay: {replay_command(case)}")
    if rep.artifact is not None:
        lines.append(f"artifact: {rep.artifact} (kvfault replay {rep.artifact})")
    return "\n".join(lines)
