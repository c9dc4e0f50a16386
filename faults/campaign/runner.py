"""The kvfault campaign (docs/design.md: #faults, #planted-regressions, #interfaces): what ``kvfault run`` runs and how it judges.

A campaign is a list of *targets*, each run over the same seeds:

- ``regression`` — a planted regression A/B: its legacy rules and the fixed stack on
  its scenario. A seed is FIXED when the legacy run violates the regression's
  signature property and the fixed run holds every property.
- ``fault`` — the fixed stack under one injector of ``faults.injectors.plans.INJECTORS`` (on the
  injector's scenario with its defaults). A seed passes when every property holds
  *and* the injector fired: a fault that never fired is NOT EXERCISED, a failure.
- ``scenario`` — the fixed stack on a plain scenario (docs/design.md#scenarios).
- ``swarm`` — the fixed stack on a scenario under a random subset of injectors drawn
  from the seed (``faults.injectors.plans.swarm_plan``); an injector some swarm run enabled must
  fire in at least one of them.

Whether stopping was right is the properties' call (``no_false_stop``, ``liveness``);
in addition, a single fault whose catalog entry names ``expect_stop`` must stop the
fixed stack with exactly that error. This module does no I/O besides the optional
callbacks: the CLI prints, ``faults.repro`` writes replay artifacts,
``faults.campaign.items`` runs targets as pytest items.
"""

from __future__ import annotations

import difflib
import shlex
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from faults.argtypes import check_scale
from faults.verdicts import OK, Verdict, worst

if TYPE_CHECKING:  # the campaign's modules import the stack lazily (cheap `kvfault list`)
    from faults.campaign.execute import CaseResult
    from faults.injectors.plans import FaultPlan

KINDS = ("regression", "fault", "scenario", "swarm")

# A regression case speaks as `kvfault repro` does; every verdict is one word of
# ``faults.verdicts``.
FIXED = Verdict.FIXED
STILL_FAILING = Verdict.STILL_FAILING
NOT_REPRODUCED = Verdict.NOT_REPRODUCED
ERROR = Verdict.ERROR
PASS = Verdict.PASS
FAIL = Verdict.FAIL
NOT_EXERCISED = Verdict.NOT_EXERCISED


class CampaignError(ValueError):
    """A campaign cannot be assembled (unknown name, missing capability): one line."""


def close_matches(name: str, known: Iterable[str]) -> str:
    """`` (did you mean: a, b?)`` for a misspelt name, or an empty string."""
    hits = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    if not hits:
        # A substring is a close match too: `kvfault repro hash` finds the hash-order one.
        hits = [k for k in known if name.lower() in k.lower()][:3]
    return f" (did you mean: {', '.join(hits)}?)" if hits else ""


@dataclass(frozen=True)
class Target:
    """One line of the campaign: a regression, an injector, a scenario or a swarm."""

    kind: str
    name: str
    scenario: str
    regression: str | None = None
    injector: str | None = None
    pinned: tuple[str, ...] = ()  # swarm only: injectors every run enables
    scale: int = 1  # the scenario's size (``faults.scenarios.RunContext.scale``)

    @property
    def id(self) -> str:
        at = f"-x{self.scale}" if self.scale != 1 else ""
        return f"{self.kind}:{self.name}{at}"

    def plan(self, seed: int) -> FaultPlan | None:
        """The fault plan of this target's run with ``seed`` (None: no plan)."""
        from faults.injectors.plans import INJECTORS, FaultPlan, FaultSpec

        if self.kind == "fault":
            assert self.injector is not None
            spec = FaultSpec.of(self.injector, **INJECTORS[self.injector].defaults)
            return FaultPlan((spec,), seed, self.scale)
        if self.kind == "swarm":
            return replace(swarm_plan(seed, self.pinned), scale=self.scale)
        return None

    def command(self, seed: int) -> str:
        """The one ``kvfault`` command that replays this target's run with ``seed``."""
        scaled = ["--scale", str(self.scale)] if self.scale != 1 else []
        if self.kind == "regression" and not scaled:
            return f"kvfault repro {self.name} --seed {seed}"
        base = ["kvfault", "run", "--first-seed", str(seed), "--seeds", "1", *scaled]
        if self.kind == "regression":
            return shlex.join([*base, "--regression", self.name])
        if self.kind == "fault":
            return shlex.join([*base, "--fault", str(self.injector)])
        if self.kind == "swarm":
            pins = ["--pin", ",".join(self.pinned)] if self.pinned else []
            return shlex.join([*base, "--swarm", "--scenario", self.scenario, *pins])
        return shlex.join([*base, "--scenario", self.scenario])

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "scenario": self.scenario,
            "regression": self.regression,
            "injector": self.injector,
            "pinned": list(self.pinned),
            **({"scale": self.scale} if self.scale != 1 else {}),
        }

    @classmethod
    def from_json(cls, obj: Any) -> Target:
        """Rebuild a target and check it still names things this version knows;
        raises ``CampaignError`` with one clear line."""
        if not isinstance(obj, dict):
            raise CampaignError("a target is a JSON object")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise CampaignError(f"target kind must be one of {', '.join(KINDS)}, got {kind!r}")
        name = obj.get("name")
        if not isinstance(name, str):
            raise CampaignError("target 'name' must be a string")
        pinned = obj.get("pinned") or []
        if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
            raise CampaignError("target 'pinned' must be a list of injector names")
        try:
            scale = check_scale(obj.get("scale", 1))
        except ValueError as exc:
            raise CampaignError(f"target {exc}") from None
        if kind == "regression":
            target = regression_target(name)
        elif kind == "fault":
            target = fault_target(name)
        elif kind == "scenario":
            target = scenario_target(name)
        else:
            scenario = obj.get("scenario")
            if not isinstance(scenario, str):
                raise CampaignError("swarm target needs a 'scenario' name")
            target = swarm_target(scenario, tuple(pinned))
        return replace(target, scale=scale)


def regression_target(name: str) -> Target:
    from faults.regressions.legacy import REGRESSIONS

    if name not in REGRESSIONS:
        raise CampaignError(f"unknown regression {name!r}{close_matches(name, REGRESSIONS)}")
    return Target("regression", name, REGRESSIONS[name].scenario, regression=name)


def fault_target(name: str) -> Target:
    from faults.injectors.plans import INJECTORS

    if name not in INJECTORS:
        raise CampaignError(f"unknown fault {name!r}{close_matches(name, INJECTORS)}")
    return Target("fault", name, INJECTORS[name].scenario, injector=name)


def scenario_target(name: str) -> Target:
    from faults.scenarios import SCENARIOS

    if name not in SCENARIOS:
        raise CampaignError(f"unknown scenario {name!r}{close_matches(name, SCENARIOS)}")
    return Target("scenario", name, name)


def swarm_target(scenario: str, pinned: Sequence[str] = ()) -> Target:
    from faults.injectors.plans import INJECTORS

    scenario_target(scenario)  # validates the name
    for p in pinned:
        if p not in INJECTORS:
            raise CampaignError(f"unknown fault {p!r} in --pin{close_matches(p, INJECTORS)}")
    _swarm_fn()  # fails early, with one line, when plans cannot draw swarms yet
    return Target("swarm", f"{scenario}", scenario, pinned=tuple(pinned))


def _swarm_fn() -> Callable[..., FaultPlan]:
    from faults.injectors import plans

    fn = getattr(plans, "swarm_plan", None)
    if fn is None:
        raise CampaignError(
            "--swarm needs faults.injectors.plans.swarm_plan, which this version lacks"
        )
    return fn


def swarm_plan(seed: int, pinned: Sequence[str] = ()) -> FaultPlan:
    """The swarm plan of one run: a random subset of injectors drawn from ``seed``
    (``pinned`` fixes the subset), as ``faults.injectors.plans.swarm_plan`` draws it."""
    return _swarm_fn()(seed, pinned=tuple(pinned) or None)


def select_targets(
    regressions: Sequence[str] | None = None,
    faults: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    swarm: bool = False,
    pinned: Sequence[str] = (),
    scale: int = 1,
) -> list[Target]:
    """The campaign's targets. With no selection at all: every regression, every
    injector (with ``swarm`` instead: a swarm on every scenario) and every scenario
    plain. Naming any group runs only what is named; with ``swarm``, the scenarios
    named (default: all) get a swarm target besides their plain one. Every target
    runs its scenario at ``scale``. Unknown names raise ``CampaignError``."""
    from faults.injectors.plans import INJECTORS
    from faults.regressions.legacy import REGRESSIONS
    from faults.scenarios import SCENARIOS

    everything = regressions is None and faults is None and scenarios is None

    def names(chosen: Sequence[str] | None, known: Iterable[str]) -> list[str]:
        return list(known) if everything else list(chosen or [])

    out = [regression_target(n) for n in names(regressions, REGRESSIONS)]
    if swarm:
        if faults:
            raise CampaignError("--swarm draws its faults; fix them with --pin, not --fault")
        out += [swarm_target(s, pinned) for s in (scenarios or list(SCENARIOS))]
    else:
        if pinned:
            raise CampaignError("--pin only makes sense with --swarm")
        out += [fault_target(n) for n in names(faults, INJECTORS)]
    out += [scenario_target(n) for n in names(scenarios, SCENARIOS)]
    try:
        check_scale(scale)
    except ValueError as exc:
        raise CampaignError(str(exc)) from None
    seen: set[str] = set()
    unique = []
    for t in out:
        if t.id not in seen:
            seen.add(t.id)
            unique.append(replace(t, scale=scale))
    return unique


@dataclass(frozen=True)
class Case:
    """One run of a target with one seed: what a replay artifact records. ``recorded``
    is a plan read back from an artifact: a replay runs it, not a fresh draw."""

    target: Target
    seed: int
    recorded: FaultPlan | None = None

    @property
    def id(self) -> str:
        return f"{self.target.id}@seed{self.seed}"

    @property
    def command(self) -> str:
        return self.target.command(self.seed)

    def plan(self) -> FaultPlan | None:
        if self.recorded is not None:
            return self.recorded
        return self.target.plan(self.seed)


@dataclass
class CaseOutcome:
    """The verdict on one case, with the evidence a reviewer needs (plain data)."""

    case: Case
    verdict: str
    signature: str = ""  # the failure: violated property with evidence, or error + op
    violations: list[str] = field(default_factory=list)
    legacy_violations: list[str] = field(default_factory=list)
    stop: str | None = None
    legacy_stop: str | None = None
    fired: dict[str, int] = field(default_factory=dict)
    wall_seconds: float = 0.0
    sim_seconds: float = 0.0
    digest: str = ""
    error: str | None = None
    checked: list[str] = field(default_factory=list)  # properties judged on the fixed run
    # The judged runs (``faults.campaign.execute.CaseResult``, for a timeline); which outcomes
    # keep them is the runner's ``keep_runs``.
    legacy_result: Any = field(default=None, repr=False, compare=False)
    fixed_result: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict in OK

    @classmethod
    def of_run(cls, case: Case, res: CaseResult, fired: dict[str, int]) -> CaseOutcome:
        """A PASS carrying one judged fixed-stack run; the caller then applies its
        target's own verdict rules (not exercised, expected stop)."""
        return cls(
            case,
            PASS,
            violations=[str(v) for v in res.violations],
            stop=res.stop,
            fired=fired,
            sim_seconds=res.sim_seconds,
            digest=res.digest,
            checked=list(res.checked),
            fixed_result=res,
        )

    def as_json(self) -> dict[str, Any]:
        plan = None
        try:
            p = self.case.plan()
            plan = p.as_json() if p is not None else None
        except CampaignError:
            pass
        return {
            "id": self.case.id,
            "target": self.case.target.as_json(),
            "seed": self.case.seed,
            "plan": plan,
            "verdict": self.verdict,
            "ok": self.ok,
            "signature": self.signature,
            "violations": self.violations,
            "legacy_violations": self.legacy_violations,
            "stop": self.stop,
            "legacy_stop": self.legacy_stop,
            "fired": self.fired,
            "wall_seconds": round(self.wall_seconds, 4),
            "sim_seconds": round(self.sim_seconds, 4),
            "digest": self.digest,
            "error": self.error,
            "properties": self.checked,
            "command": self.case.command,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CaseOutcome:
        return cls(
            case=Case(Target.from_json(obj["target"]), int(obj["seed"])),
            verdict=obj["verdict"],
            signature=obj.get("signature", ""),
            violations=list(obj.get("violations", [])),
            legacy_violations=list(obj.get("legacy_violations", [])),
            stop=obj.get("stop"),
            legacy_stop=obj.get("legacy_stop"),
            fired=dict(obj.get("fired", {})),
            wall_seconds=float(obj.get("wall_seconds", 0.0)),
            sim_seconds=float(obj.get("sim_seconds", 0.0)),
            digest=obj.get("digest", ""),
            error=obj.get("error"),
        )


def signature(result: CaseResult, prop: str | None = None) -> str:
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


class _Recording:
    """An injector factory that remembers what it built, so a case counts only the
    firings of *its plan's* injectors (a scenario's own injectors may share a name)."""

    def __init__(self, plan: FaultPlan | None):
        self.plan = plan
        self.made: list[list[Any]] = []

    def __call__(self) -> list[Any]:
        injs = self.plan.injectors() if self.plan is not None else []
        self.made.append(injs)
        return injs

    def fired(self) -> dict[str, int]:
        from faults.injectors.plans import fired_report

        return fired_report(self.made[0] if self.made else [])


class CaseRunner:
    """Runs cases; remembers fixed-stack runs without a plan, so a regression's fixed
    side and the plain scenario with the same seed run once per campaign.

    ``keep_runs`` says which outcomes keep their runs (for timelines): ``"failing"``
    (cases that did not pass), ``"all"`` or ``"none"``."""

    def __init__(self, keep_runs: str = "failing"):
        if keep_runs not in ("failing", "all", "none"):
            raise ValueError(f"keep_runs must be failing, all or none, got {keep_runs!r}")
        self.keep_runs = keep_runs
        self._fixed: dict[tuple[str, int, int], CaseResult] = {}

    def fixed(self, scenario: str, seed: int, scale: int = 1) -> CaseResult:
        from faults.campaign.execute import run_case

        key = (scenario, seed, scale)
        if key not in self._fixed:
            res = run_case(scenario, seed, scale=scale)
            if res.ok and self.keep_runs != "all":
                res.run = None  # the cache outlives the case: keep only what is judged
            self._fixed[key] = res
        return self._fixed[key]

    def run(self, case: Case) -> CaseOutcome:
        """Run and judge ``case``; an exception becomes an ERROR verdict, not a crash."""
        t0 = time.perf_counter()
        try:
            out = self._judge(case)
        except Exception as exc:  # a crash of one case must not end the campaign
            out = CaseOutcome(
                case,
                ERROR,
                signature=f"{type(exc).__name__}: {exc}",
                error=traceback.format_exc(),
            )
        # A fixed run shared with an earlier target (cached) still shows its own cost.
        shared = out.fixed_result.wall_seconds if out.fixed_result is not None else 0.0
        out.wall_seconds = max(time.perf_counter() - t0, shared)
        if self.keep_runs == "none" or (self.keep_runs == "failing" and out.ok):
            out.legacy_result = out.fixed_result = None
        return out

    def _judge(self, case: Case) -> CaseOutcome:
        from faults.campaign.execute import run_case

        t = case.target
        if t.kind == "regression":
            return self._judge_regression(case)
        plan = case.plan()
        if plan is None:
            res = self.fixed(t.scenario, case.seed, t.scale)
            fired: dict[str, int] = {}
        else:
            rec = _Recording(plan)
            res = run_case(
                t.scenario,
                case.seed,
                injectors=rec,
                # The hash-order shuffle salts request ids: the plan says how.
                request_map=_plan_map(plan, "request_map"),
                replay_map=_plan_map(plan, "replay_map"),
                scale=plan.scale,
            )
            fired = rec.fired()
        out = CaseOutcome.of_run(case, res, fired)
        expected = _expected_stop(t)
        stopped_with = _stop_error(res)
        if not res.ok:
            out.verdict, out.signature = FAIL, signature(res)
        elif t.kind == "fault" and not fired.get(str(t.injector)):
            # Checked before the expected stop: a fault that never fired cannot have
            # caused one, and "not exercised" says what is wrong.
            out.verdict = NOT_EXERCISED
            out.signature = f"{t.injector} never fired on {t.scenario} with seed {case.seed}"
        elif expected and stopped_with != expected:
            out.verdict = FAIL
            got = f"stopped with {stopped_with}" if stopped_with else "did not stop"
            out.signature = (
                f"{t.injector} on {t.scenario}: the fixed stack must stop with {expected}; it {got}"
            )
        return out

    def _judge_regression(self, case: Case) -> CaseOutcome:
        from faults.campaign.execute import run_case
        from faults.regressions.legacy import REGRESSIONS
        from faults.scenarios import SCENARIOS

        reg = REGRESSIONS[str(case.target.regression)]
        props = list(SCENARIOS[reg.scenario].properties)
        if reg.signature != "determinism":
            # The legacy side only has to show its signature; its determinism re-run
            # would double the cost of every regression for nothing.
            props = [p for p in props if p != "determinism"]
        scale = case.target.scale
        legacy = run_case(reg.scenario, case.seed, rules=reg.rules, properties=props, scale=scale)
        fixed = self.fixed(reg.scenario, case.seed, scale)
        out = CaseOutcome(
            case,
            FIXED,
            violations=[str(v) for v in fixed.violations],
            legacy_violations=[str(v) for v in legacy.violations],
            stop=fixed.stop,
            legacy_stop=legacy.stop,
            sim_seconds=legacy.sim_seconds + fixed.sim_seconds,
            digest=fixed.digest,
            checked=list(fixed.checked),
            legacy_result=legacy,
            fixed_result=fixed,
        )
        caught = any(v.prop == reg.signature for v in legacy.violations)
        if not fixed.ok:
            out.verdict, out.signature = STILL_FAILING, signature(fixed)
        elif caught:
            out.signature = signature(legacy, reg.signature)
        else:
            out.verdict = NOT_REPRODUCED
            if legacy.violations:
                out.signature = f"legacy failed, but not with its signature {reg.signature}: {signature(legacy)}"
            else:
                out.signature = f"legacy passed every property; {reg.signature} expected to fail"
        return out


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
        if self.target.kind == "regression":
            # Hash-order regressions are caught under some hash seeds only: a target is
            # FIXED when some seed catches it and no seed broke; the table shows k/N.
            bad = worst(c.verdict for c in self.cases if c.verdict != NOT_REPRODUCED)
            return bad or (FIXED if self.caught else NOT_REPRODUCED)
        return worst(c.verdict for c in self.cases) or PASS

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
        """One short line for the results table."""
        n = len(self.cases)
        bad = [c for c in self.cases if not c.ok]
        t = self.target
        if t.kind == "regression":
            from faults.regressions.legacy import REGRESSIONS

            sig = REGRESSIONS[t.name].signature
            text = f"{sig} caught on {self.caught}/{n} seeds"
            if self.caught and self.caught < n:
                text += " (missed: " + ",".join(str(c.case.seed) for c in bad) + ")"
            return text
        if bad:
            return f"{len(bad)}/{n} seeds: {bad[0].signature}"
        if t.kind in ("fault", "swarm"):
            fired = self.fired
            return "fired " + (
                ", ".join(f"{k} x{v}" for k, v in sorted(fired.items())) or "nothing"
            )
        stops = sum(1 for c in self.cases if c.stop)
        return f"stopped correctly on {stops}/{n} seeds" if stops else "no stop"

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

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TargetOutcome:
        return cls(
            Target.from_json(obj["target"]), [CaseOutcome.from_json(c) for c in obj["cases"]]
        )


@dataclass
class CampaignResult:
    """Every target's outcome; ``ok`` is the campaign's exit-0 condition."""

    targets: list[TargetOutcome]
    wall_seconds: float = 0.0

    def _swarm_counts(self) -> tuple[set[str], dict[str, int]]:
        enabled: set[str] = set()
        fired: dict[str, int] = {}
        for t in self.targets:
            if t.target.kind != "swarm":
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
    def never_drawn(self) -> list[str]:
        """Injectors no swarm run enabled (more seeds draw more subsets)."""
        from faults.injectors.plans import INJECTORS

        if not any(t.target.kind == "swarm" for t in self.targets):
            return []
        enabled, _ = self._swarm_counts()
        return sorted(n for n in INJECTORS if n not in enabled)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.targets) and not self.unexercised

    @property
    def cases(self) -> list[CaseOutcome]:
        return [c for t in self.targets for c in t.cases]

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "targets_total": len(self.targets),
            "targets_ok": sum(t.ok for t in self.targets),
            "cases_total": len(self.cases),
            "cases_ok": sum(c.ok for c in self.cases),
            "unexercised": self.unexercised,
            "never_drawn": self.never_drawn,
            "wall_seconds": round(self.wall_seconds, 3),
            "targets": [t.as_json() for t in self.targets],
        }


def _plan_map(plan: FaultPlan, which: str) -> Any:
    fn = getattr(plan, which, None)
    return fn() if fn is not None else None


def _expected_stop(target: Target) -> str | None:
    """The named error the catalog says the fixed stack stops with under a single
    fault on its own scenario (None: it must not need to stop)."""
    if target.kind != "fault":
        return None
    from faults.injectors.plans import INJECTORS

    return getattr(INJECTORS[str(target.injector)], "expect_stop", None)


def _stop_error(res: CaseResult) -> str | None:
    """The name of the error the run stopped with (engine stop or startup refusal)."""
    from reference.trace import Ev

    if res.run is None:
        return None
    stop = next(iter(res.run.trace.of(Ev.STOP)), None)
    return stop.data.get("error") if stop is not None else None


def _plan_names(case: Case) -> list[str]:
    try:
        plan = case.plan()
    except CampaignError:
        return []
    return [f.injector for f in plan.faults] if plan is not None else []


# Called before a case runs (may return the path of its replay artifact) and after it.
BeforeCase = Callable[[Case], Any]
AfterCase = Callable[[Case, CaseOutcome, Any], None]
Progress = Callable[[int, int, Case], None]


def run_target(
    target: Target,
    seeds: Sequence[int],
    runner: CaseRunner | None = None,
    before: BeforeCase | None = None,
    after: AfterCase | None = None,
    starting: Callable[[Case], None] | None = None,
) -> TargetOutcome:
    """Run ``target`` once per seed. ``before(case)`` runs first (its return value is
    handed to ``after``), so a replay artifact exists while the case runs."""
    runner = runner or CaseRunner()
    cases = []
    for seed in seeds:
        case = Case(target, seed)
        if starting:
            starting(case)
        token = before(case) if before else None
        outcome = runner.run(case)
        if after:
            after(case, outcome, token)
        cases.append(outcome)
    return TargetOutcome(target, cases)


def run_campaign(
    targets: Sequence[Target],
    seeds: Sequence[int],
    before: BeforeCase | None = None,
    after: AfterCase | None = None,
    progress: Progress | None = None,
    keep_runs: str = "failing",
) -> CampaignResult:
    """Run every target over every seed in this process; ``progress(done, total,
    case)`` is called before each case and once at the end."""
    t0 = time.perf_counter()
    runner = CaseRunner(keep_runs=keep_runs)
    total = len(targets) * len(seeds)
    done = 0

    def starting(case: Case) -> None:
        nonlocal done
        if progress:
            progress(done, total, case)
        done += 1

    outcomes = [run_target(t, seeds, runner, before, after, starting) for t in targets]
    if progress and targets and seeds:
        progress(total, total, Case(targets[-1], seeds[-1]))
    return CampaignResult(outcomes, time.perf_counter() - t0)
