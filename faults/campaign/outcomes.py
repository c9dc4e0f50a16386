"""The verdicts of a campaign as data: one case's record (``CaseOutcome``), a target's
over its seeds (``TargetOutcome``), and the campaign's (``CampaignResult``).
Rendering is the report's job (the table, ``summary.json``, JUnit, ``kvfault repro``):
these only say what happened, and keep the evidence as data until then.

A case passes through three records, each for its own reader:

- ``kvfault.faults.runs.RunResult``: what one run left (its trace, requests, engines' ends),
  for the properties to read. A case has one or two (a regression: legacy and fixed).
- ``kvfault.faults.campaign.execute.JudgedRun``: one run judged: the properties checked and
  the ``Violation`` objects they returned, its stop, digest and ending. The judge
  reads it; a cache of fixed runs keeps it after the run itself is let go.
- ``CaseOutcome``: the case's one record: its verdict and the reason (``signature``),
  the judged runs' violations (``Violation`` objects, not text) and stops, what fired,
  times and digest. The summary, JUnit, the table, the artifacts and ``kvfault
  repro`` all render from it; ``as_json`` is its plain form for other processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

from kvfault.faults.campaign.targets import CampaignError, Case, Target
from kvfault.faults.properties.violation import Violation
from kvfault.faults.tiers import Tiers
from kvfault.faults.verdicts import OK, Verdict, exit_code, worst

if TYPE_CHECKING:
    from kvfault.faults.campaign.execute import JudgedRun

FIXED = Verdict.FIXED
NOT_EXERCISED = Verdict.NOT_EXERCISED
PASS = Verdict.PASS


@dataclass
class CaseOutcome:
    """The record of one case: its verdict, with the evidence a reviewer needs (module
    doc). ``violations`` are the fixed (or only) run's, ``legacy_violations`` a
    regression's legacy run's: ``Violation`` objects, formatted only by a renderer."""

    case: Case
    verdict: str
    signature: str = ""  # the failure: violated property with evidence, or error + op
    violations: list[Violation] = field(default_factory=list)
    legacy_violations: list[Violation] = field(default_factory=list)
    stop: str | None = None
    legacy_stop: str | None = None
    fired: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0
    sim_seconds: float = 0.0
    digest: str = ""
    error: str | None = None
    checked: list[str] = field(default_factory=list)  # properties judged on the fixed run
    # The --timeout this case ran past (an ERROR: its replay needs the same bound), else None.
    timeout_s: float | None = None
    # The judged runs, for a timeline; which outcomes keep them is the runner's ``keep_runs``.
    legacy_result: JudgedRun | None = field(default=None, repr=False, compare=False)
    fixed_result: JudgedRun | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict in OK

    @classmethod
    def of_run(
        cls, case: Case, res: JudgedRun, fired: dict[str, int], digest: bool = True
    ) -> CaseOutcome:
        """A PASS carrying one judged fixed-stack run (its trace digest only when
        ``digest``); the caller then applies its target's own verdict rules (not
        exercised, expected stop)."""
        return cls(
            case,
            PASS,
            violations=list(res.violations),
            stop=res.stop,
            fired=fired,
            sim_seconds=res.sim_seconds,
            digest=res.digest if digest else "",
            checked=list(res.checked),
            fixed_result=res,
        )

    def plan_json(self) -> dict[str, Any] | None:
        """The case's fault plan as JSON (None: it runs none, or it names one this
        version no longer knows)."""
        try:
            plan = self.case.plan()
        except CampaignError:
            return None
        return plan.as_json() if plan is not None else None

    def as_json(self) -> dict[str, Any]:
        """The record as plain JSON, for another process (``kvfault.faults.campaign.reading`` reads it)."""
        return {
            "id": self.case.id,
            "target": self.case.target.as_json(),
            "seed": self.case.seed,
            "plan": self.plan_json(),
            "verdict": self.verdict,
            "ok": self.ok,
            "signature": self.signature,
            "violations": [v.as_json() for v in self.violations],
            "legacy_violations": [v.as_json() for v in self.legacy_violations],
            "stop": self.stop,
            "legacy_stop": self.legacy_stop,
            "fired": self.fired,
            "wall_seconds": round(self.wall_seconds, 4),
            "sim_seconds": round(self.sim_seconds, 4),
            "digest": self.digest,
            "error": self.error,
            "properties": self.checked,
            "timeout_s": self.timeout_s,
            "command": self.case.command,
        }


def signature(result: JudgedRun, prop: str | None = None) -> str:
    """A run's failure in one line: the first violation (of ``prop`` when given) with
    its evidence, then the named error the engine stopped with, if any."""
    viols = [v for v in result.violations if prop is None or v.prop == prop] or result.violations
    parts = []
    if viols:
        more = f" (+{len(viols) - 1} more)" if len(viols) > 1 else ""
        parts.append(f"{viols[0]}{more}")
    if result.stop:
        parts.append(f"stop: {result.stop}")
    return "; ".join(parts)


@runtime_checkable
class RowKind(Protocol):
    """What a row asks of its target's kind (``kvfault.faults.campaign.kinds.TargetKind``,
    which judges cases into outcomes, so this module names it by this shape)."""

    def verdict(self, cases: Sequence[CaseOutcome]) -> Verdict: ...

    def detail(self, row: TargetOutcome) -> str: ...


def row_kind(target: Target) -> RowKind:
    """``target``'s kind as a row's judge; one-line ``CampaignError`` for a kind that is
    none (every ``TargetKind`` is one)."""
    kind = target.kind
    if isinstance(kind, RowKind):
        return kind
    raise CampaignError(f"target kind {kind.name!r} gives no row verdict")


@dataclass
class TargetOutcome:
    """A target over all its seeds: its cases and the target's verdict."""

    target: Target
    cases: list[CaseOutcome]

    @property
    def caught(self) -> int:
        return sum(c.verdict == FIXED for c in self.cases)

    @property
    def verdict(self) -> Verdict:
        return row_kind(self.target).verdict(self.cases)

    @property
    def ok(self) -> bool:
        return self.verdict in OK

    @property
    def seeds(self) -> list[int]:
        return [c.case.seed for c in self.cases]

    @property
    def fired(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cases:
            for k, v in c.fired.items():
                out[k] = out.get(k, 0) + v
        return out

    def detail(self) -> str:
        """One short line for the results table (the target's kind says what)."""
        return row_kind(self.target).detail(self)

    @property
    def wall_seconds(self) -> float:
        return sum(c.wall_seconds for c in self.cases)

    @property
    def sim_seconds(self) -> float:
        return sum(c.sim_seconds for c in self.cases)

    @property
    def checked(self) -> list[str]:
        """Properties judged on the fixed stack, in the order the checkers run."""
        out: list[str] = []
        for c in self.cases:
            out.extend(p for p in c.checked if p not in out)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.target.id,
            "target": self.target.as_json(),
            "verdict": self.verdict,
            "ok": self.ok,
            "detail": self.detail(),
            "seeds": self.seeds,
            "fired": self.fired,
            "properties": self.checked,
            "wall_seconds": round(self.wall_seconds, 4),
            "sim_seconds": round(self.sim_seconds, 4),
            "cases": [c.as_json() for c in self.cases],
        }


@dataclass(frozen=True)
class CampaignFailure:
    """A failure of the campaign as a whole rather than of one of its cases (plain
    data). ``kind`` names it: ``not_exercised`` (injectors swarm runs enabled that never
    fired in any of them), ``timeout`` (a case ran past ``--timeout`` and ended a run
    in one process) or ``interrupted`` (Ctrl-C or a stop signal ended it); ``verdict`` is what it counts as; ``message`` says it in one line."""

    kind: str
    verdict: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "verdict": str(self.verdict), "message": self.message}


@dataclass
class CampaignResult:
    """Every target's outcome, and the campaign's one verdict (``verdict``, ``ok``,
    ``exit_code``): the table's footer, ``summary.json``, ``junit.xml`` and the exit
    status all read it. ``stopped`` holds campaign-level failures its runner found
    (a timeout); ``failures`` adds the ones read off the outcomes."""

    targets: list[TargetOutcome]
    wall_seconds: float = 0.0
    stopped: list[CampaignFailure] = field(default_factory=list)

    def _swarm_counts(self) -> tuple[set[str], dict[str, int]]:
        enabled: set[str] = set()
        fired: dict[str, int] = {}
        for t in self.targets:
            if not t.target.kind.draws_faults:
                continue
            for c in t.cases:
                enabled.update(_plan_names(c.case))
                for k, v in c.fired.items():
                    fired[k] = fired.get(k, 0) + v
        return enabled, fired

    @property
    def unexercised(self) -> list[str]:
        """Injectors that swarm runs enabled but that never fired in any of them (a
        single-fault target reports its own NOT EXERCISED)."""
        enabled, fired = self._swarm_counts()
        return sorted(n for n in enabled if not fired.get(n))

    @property
    def draws(self) -> bool:
        """Whether a swarm row drew its injectors (one with ``--pin`` draws none: it
        enables exactly the pinned ones)."""
        return any(t.target.kind.draws_faults and not t.target.pinned for t in self.targets)

    @property
    def never_drawn(self) -> list[str]:
        """Faults no drawing swarm run enabled, of those its tier draws from (more seeds
        draw more)."""
        if not self.draws:
            return []
        enabled, _ = self._swarm_counts()
        tiers = {t.target.tier for t in self.targets if t.target.kind.draws_faults}
        plans = [Tiers.installed()[tier].plans() for tier in tiers]
        drawable = {n for p in plans if p is not None for n in p.faults()}
        return sorted(n for n in drawable if n not in enabled)

    @property
    def failures(self) -> list[CampaignFailure]:
        """The campaign-level failures: what fails the campaign beyond its rows."""
        out = list(self.stopped)
        # A campaign cut short (a timeout, an interrupt) ran too few runs to say which
        # enabled injectors never fire.
        if self.unexercised and not self.stopped:
            out.append(
                CampaignFailure(
                    "not_exercised",
                    NOT_EXERCISED,
                    "NOT EXERCISED (enabled, never fired) in every swarm run: "
                    + ", ".join(self.unexercised),
                )
            )
        return out

    def _verdicts(self) -> list[str]:
        return [t.verdict for t in self.targets] + [f.verdict for f in self.failures]

    @property
    def verdict(self) -> Verdict:
        """The worst of the rows' verdicts and the campaign-level failures' (PASS when
        every one is good)."""
        return worst(self._verdicts()) or PASS

    @property
    def ok(self) -> bool:
        """The campaign's exit-0 condition."""
        return self.verdict in OK

    @property
    def exit_code(self) -> int:
        """0 when every row and the campaign hold; 1 when the stack is wrong (a row
        failed, an injector never fired); 2 when something proved nothing (an error, a
        timeout, a regression that did not reproduce)."""
        return exit_code(self._verdicts())

    def tolerated(self, case: CaseOutcome) -> bool:
        """Whether a case that did not pass fails nothing: its target holds (a
        hash-order regression not reproduced on this seed, caught on another)."""
        if case.ok:
            return False
        return any(t.ok and any(c is case for c in t.cases) for t in self.targets)

    @property
    def cases(self) -> list[CaseOutcome]:
        return [c for t in self.targets for c in t.cases]

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verdict": str(self.verdict),
            "exit_code": self.exit_code,
            "targets_total": len(self.targets),
            "targets_ok": sum(t.ok for t in self.targets),
            "cases_total": len(self.cases),
            "cases_ok": sum(c.ok for c in self.cases),
            "failures": [f.as_json() for f in self.failures],
            "unexercised": self.unexercised,
            "never_drawn": self.never_drawn,
            "wall_seconds": round(self.wall_seconds, 3),
            "targets": [t.as_json() for t in self.targets],
        }


def in_campaign_order(
    targets: Sequence[Target], seeds: Sequence[int], done: Mapping[tuple[str, int], CaseOutcome]
) -> list[TargetOutcome]:
    """The outcomes ``done`` (by target id and seed) in the order of a run in one
    process: target by target, each over ``seeds`` in order; a case not done is left out."""
    return [
        TargetOutcome(t, [done[(t.id, s)] for s in seeds if (t.id, s) in done]) for t in targets
    ]


def _plan_names(case: Case) -> list[str]:
    try:
        plan = case.plan()
    except CampaignError:
        return []
    return [f.injector for f in plan.faults] if plan is not None else []
