"""The four kinds of campaign target, as classes: ``regression``, ``fault``,
``scenario`` and ``swarm``. ``KINDS`` names them, here and nowhere else.

A kind says, for a target of its kind: how it is rebuilt from a replay artifact's
JSON (``build``), which fault plan a seed runs (``plan``), the one ``kvfault`` command
that replays a case (``command``), how a case is judged (``judge``; the ending its
catalog entry declares, ``unmet_ending``), the row's verdict over its seeds
(``verdict``) and the row's detail text (``detail``). Every place that used to ask
"which kind is this?" asks the kind instead.

A target holds its kind's instance (``Target.kind``); artifacts, ``summary.json`` and
the table carry the kind's name, a plain string (``str(kind)``, ``kind.name``).
Instances hold no state: they compare by name and pickle as the name, so a case sent
back from a worker process has the same kind as the one sent out.

- ``regression``: a planted regression A/B, its legacy rules and the fixed stack on
  its scenario. A seed is FIXED when the legacy run violates the regression's
  signature property and ends as its entry declares, and the fixed run holds every
  property and ends as its scenario declares. The row is FIXED when some seed caught it
  and none broke (hash-order regressions show under some hash seeds only).
- ``fault``: the fixed stack under one injector (or one fault of a tier's own catalog). A
  seed passes when every property holds, the injector fired (else NOT EXERCISED) and
  the run ends as the injector's entry declares.
- ``scenario``: the stack on a plain scenario; every property holds and the run ends as
  the scenario declares.
- ``swarm``: a random subset of injectors drawn from the seed; judged by the properties
  alone. An injector some swarm run enabled must fire in one of them (a campaign-level
  NOT EXERCISED, ``kvfault.faults.campaign.outcomes.CampaignResult``).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence

from kvfault.faults.campaign.execute import JudgedRun, properties_of, run_case, scenarios_on
from kvfault.faults.campaign.outcomes import CaseOutcome, TargetOutcome, signature
from kvfault.faults.campaign.targets import CampaignError, Case, Target
from kvfault.faults.catalog import UnknownName, close_matches, resolve
from kvfault.faults.errors import KvfaultError
from kvfault.faults.injectors.plans import FaultPlan, fired_report
from kvfault.faults.properties.names import Prop
from kvfault.faults.regressions.legacy import REGRESSIONS
from kvfault.faults.tiers import Executor, FaultPlans, Tiers, default_tier, tier_or_default
from kvfault.faults.verdicts import Verdict, worst

if TYPE_CHECKING:
    from kvfault.faults.regressions.legacy import Regression as PlantedRegression
    from kvfault.faults.runs import Expect


class Runs(Protocol):
    """What a kind's judge asks of the case runner that hands it a case
    (``kvfault.faults.campaign.runner.CaseRunner``): the tier's executor, whether to keep
    digests, and the stack's plain run of a scenario (computed once per runner)."""

    executor: Executor
    digests: bool

    def fixed(
        self, scenario: str, seed: int, scale: int = 1, stack: Target | None = None
    ) -> JudgedRun: ...


class UndeclaredEnding(KvfaultError, ValueError):
    """A catalog entry (scenario, fault, regression) that declares no expected ending:
    no run can be judged against it, so its case is an ERROR, not a FAIL."""


class TargetKind:
    """What a target of one kind does differently from the others (module doc).
    Subclasses set ``name`` and override what their kind changes."""

    name: ClassVar[str]
    # A regression row already runs its own legacy rules: it refuses ``--legacy``.
    takes_legacy_stack: ClassVar[bool] = True
    # Its plan is drawn per seed (swarm): the campaign counts what its runs enabled.
    draws_faults: ClassVar[bool] = False
    # A replay artifact's recorded plan is replayed as written (not drawn again).
    replays_plan: ClassVar[bool] = False
    # Where a row of this kind runs in a campaign on a tier that restarts its server
    # (``faults.campaign.targets.select_targets``): lower first.
    rank: ClassVar[int] = 0

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<target kind {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TargetKind) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> tuple[Callable[[str], TargetKind], tuple[str]]:
        return kind_named, (self.name,)

    # -- a target of this kind -------------------------------------------------------

    def build(self, name: str, tier: str, obj: Mapping[str, Any] | None = None) -> Target:
        """The target ``name`` on ``tier`` (``obj``: the rest of its JSON); raises
        ``CampaignError`` with one line for a name this version does not know or
        ``tier`` does not run."""
        raise NotImplementedError

    def plan(self, target: Target, seed: int) -> FaultPlan | None:
        """The in-process fault plan of ``target``'s run with ``seed`` (None: none)."""
        return None

    def command(self, target: Target, seed: int) -> str:
        """The one ``kvfault`` command that replays ``target``'s run with ``seed``."""
        return shlex.join([*_run_command(target, seed), *self.selection(target)])

    def selection(self, target: Target) -> list[str]:
        """The ``kvfault run`` options that select ``target``."""
        return ["--scenario", target.scenario]

    def restarts_server(self, target: Target) -> bool:
        """Whether ``target``'s runs kill the tier's server (they run last)."""
        return False

    # -- judging -----------------------------------------------------------------------

    def judge(self, runner: Runs, case: Case) -> CaseOutcome:
        """Run ``case`` on ``runner``'s tier and judge it: every property must hold and
        the run must end as ``unmet_ending`` allows."""
        res, fired = self.run(runner, case)
        out = CaseOutcome.of_run(case, res, fired, digest=runner.digests)
        if not res.ok:
            out.verdict, out.signature = Verdict.FAIL, signature(res)
            return out
        unmet = self.unexercised(case, fired) or self.unmet_ending(case.target, res)
        if unmet:
            out.verdict, out.signature = unmet
        return out

    def run(self, runner: Runs, case: Case) -> tuple[JudgedRun, dict[str, int]]:
        """The judged run of ``case`` and how often each of its faults fired."""
        t = case.target
        plan = case.plan()
        if plan is None:
            return runner.fixed(t.scenario, case.seed, t.scale, t), {}
        rec = _Recording(plan.injectors)
        res = run_case(
            t.scenario,
            case.seed,
            rules=t.rules(),
            injectors=rec,
            # The hash-order shuffle salts request ids: the plan says how.
            request_map=plan.request_map(),
            replay_map=plan.replay_map(),
            executor=runner.executor,
            scale=plan.scale,
        )
        return res, rec.fired()

    def unexercised(self, case: Case, fired: dict[str, int]) -> tuple[Verdict, str] | None:
        """The verdict and its reason when ``case``'s own fault never fired."""
        return None

    def unmet_ending(self, target: Target, res: JudgedRun) -> tuple[Verdict, str] | None:
        """FAIL and how the run's ending differs from what ``target``'s catalog entry
        declares (None: as declared)."""
        return None

    # -- a row over its seeds --------------------------------------------------------

    def verdict(self, cases: Sequence[CaseOutcome]) -> Verdict:
        """The row's verdict over its cases: the worst of them (PASS when all passed)."""
        return worst(c.verdict for c in cases) or Verdict.PASS

    def detail(self, row: TargetOutcome) -> str:
        """One short line for the results table."""
        bad = [c for c in row.cases if not c.ok]
        if bad:
            return f"{len(bad)}/{len(row.cases)} seeds: {bad[0].signature}"
        return self.held(row)

    def held(self, row: TargetOutcome) -> str:
        """The detail of a row whose every case passed."""
        stops = sum(1 for c in row.cases if c.stop)
        return f"stopped correctly on {stops}/{len(row.cases)} seeds" if stops else "no stop"

    def reproduction(self, out: CaseOutcome) -> list[str]:
        """What ``kvfault repro``/``replay`` prints about a case before its signature:
        what ran, how it ended, the verdict."""
        case = out.case
        plan = case.plan()
        if plan is not None:
            faults = ", ".join(f.injector for f in plan.faults)
        else:  # a tier's own fault is no plan; a plain scenario has none
            faults = case.target.injector or "no fault"
        lines = [f"replay {case.id}: {case.target.scenario} under {faults}"]
        # The stack the case ran: the fixed one, or a regression's legacy rules (--legacy).
        # A tier's engine (``Tier.engine``) is the code under test, not kvfault's fixed stack.
        engine = Tiers.installed()[case.target.tier].engine
        side = f"legacy {case.target.stack}" if case.target.stack else engine or "fixed"
        lines.append(f"  {side:<9}  {out.verdict}  {out.signature or _held_text(out.fired)}")
        if out.stop and out.verdict == Verdict.PASS:
            lines.append(f"             stopped correctly: {out.stop}")
        lines.append(out.verdict)
        return lines


class Regression(TargetKind):
    name = "regression"
    takes_legacy_stack = False
    rank = 1

    def build(self, name: str, tier: str, obj: Mapping[str, Any] | None = None) -> Target:
        return Target(self, name, _resolve(self, name, tier), regression=name, tier=tier)

    def command(self, target: Target, seed: int) -> str:
        if target.tier == default_tier() and target.scale == 1:
            return f"kvfault repro {target.name} --seed {seed}"
        return super().command(target, seed)

    def selection(self, target: Target) -> list[str]:
        return ["--regression", target.name]

    def judge(self, runner: Runs, case: Case) -> CaseOutcome:
        """A/B: the legacy rules must fail with the regression's signature property and
        end as its entry declares; the fixed stack must hold every property and end as
        its scenario declares."""
        reg = REGRESSIONS[str(case.target.regression)]
        scenario = case.target.scenario
        props = properties_of(scenario, runner.executor)
        if reg.signature != Prop.DETERMINISM:
            # The legacy side only has to show its signature; its determinism re-run
            # would double the cost of every regression for nothing.
            props = [p for p in props if p != Prop.DETERMINISM]
        scale = case.target.scale
        legacy = run_case(
            scenario, case.seed, rules=reg.rules, properties=props, executor=runner.executor,
            scale=scale,
        )  # fmt: skip
        fixed = runner.fixed(scenario, case.seed, scale)
        out = CaseOutcome(
            case,
            Verdict.FIXED,
            violations=list(fixed.violations),
            legacy_violations=list(legacy.violations),
            stop=fixed.stop,
            legacy_stop=legacy.stop,
            sim_seconds=legacy.sim_seconds + fixed.sim_seconds,
            digest=fixed.digest if runner.digests else "",
            checked=list(fixed.checked),
            legacy_result=legacy,
            fixed_result=fixed,
        )
        caught = any(v.prop == reg.signature for v in legacy.violations)
        fixed_unmet = _unmet_scenario(scenario, fixed, case.target.tier)
        legacy_unmet = _unmet_legacy(reg, legacy)
        if not fixed.ok:
            out.verdict, out.signature = Verdict.STILL_FAILING, signature(fixed)
        elif fixed_unmet:
            out.verdict, out.signature = Verdict.STILL_FAILING, f"fixed stack: {fixed_unmet}"
        elif not caught:
            out.verdict = Verdict.NOT_REPRODUCED
            if legacy.violations:
                out.signature = f"legacy failed, but not with its signature {reg.signature}: {signature(legacy)}"
            else:
                out.signature = f"legacy passed every property; {reg.signature} expected to fail"
        elif legacy_unmet:
            out.verdict, out.signature = Verdict.NOT_REPRODUCED, legacy_unmet
        else:
            out.signature = signature(legacy, reg.signature)
        return out

    def reproduction(self, out: CaseOutcome) -> list[str]:
        t, seed = out.case.target, out.case.seed
        reg = REGRESSIONS[t.name]
        lines = [f"repro {t.name} (seed {seed}): {reg.description}"]
        lines.append(f"  scenario   {t.scenario}; signature property {reg.signature}")
        if out.verdict == Verdict.ERROR:
            lines.append(f"  error      {out.signature}")
        else:
            for side, violations, stop in (
                ("legacy", out.legacy_violations, out.legacy_stop),
                ("fixed", out.violations, out.stop),
            ):
                failed = "FAIL" if violations else "PASS"
                lines.append(
                    f"  {side:<9}  {failed:4s}  {_first(violations) or 'every property held'}"
                )
                if stop:
                    lines.append(f"             stop: {stop}")
        meaning = {
            Verdict.FIXED: f"the legacy stack fails with {reg.signature}, the fixed stack passes",
            Verdict.STILL_FAILING: "the fixed stack fails too",
            Verdict.NOT_REPRODUCED: f"the legacy stack did not fail with {reg.signature}",
            Verdict.ERROR: "the case could not run",
        }[Verdict(out.verdict)]
        lines.append(f"{out.verdict}: {meaning}")
        return lines

    def verdict(self, cases: Sequence[CaseOutcome]) -> Verdict:
        # Hash-order regressions are caught under some hash seeds only: a row is FIXED
        # when some seed catches it and no seed broke; the table shows k/N.
        bad = worst(c.verdict for c in cases if c.verdict != Verdict.NOT_REPRODUCED)
        caught = any(c.verdict == Verdict.FIXED for c in cases)
        return bad or (Verdict.FIXED if caught else Verdict.NOT_REPRODUCED)

    def detail(self, row: TargetOutcome) -> str:
        sig = REGRESSIONS[row.target.name].signature
        text = f"{sig} caught on {row.caught}/{len(row.cases)} seeds"
        if row.caught and row.caught < len(row.cases):
            missed = [c for c in row.cases if not c.ok]
            text += " (missed: " + ",".join(str(c.case.seed) for c in missed) + ")"
        return text


class Fault(TargetKind):
    name = "fault"
    replays_plan = True
    rank = 2

    def build(self, name: str, tier: str, obj: Mapping[str, Any] | None = None) -> Target:
        return Target(self, name, _resolve(self, name, tier), injector=name, tier=tier)

    def plan(self, target: Target, seed: int) -> FaultPlan | None:
        plans = Tiers.installed()[target.tier].plans()
        if plans is None:
            return None  # built by its tier's fault catalog, not a plan
        return plans.plan(str(target.injector), seed, target.scale)

    def selection(self, target: Target) -> list[str]:
        return ["--fault", str(target.injector)]

    def restarts_server(self, target: Target) -> bool:
        tier = Tiers.installed()[target.tier]
        return tier.plans() is None and tier.fault(target.name).kills_server

    def run(self, runner: Runs, case: Case) -> tuple[JudgedRun, dict[str, int]]:
        t = case.target
        if case.plan() is not None:
            return super().run(runner, case)
        # A fault of a tier whose faults are not plans: its own catalog builds it.
        info = Tiers.installed()[t.tier].fault(str(t.injector))
        rec = _Recording(lambda: [info.factory(case.seed)])
        res = run_case(t.scenario, case.seed, injectors=rec, executor=runner.executor)
        return res, rec.fired()

    def unexercised(self, case: Case, fired: dict[str, int]) -> tuple[Verdict, str] | None:
        # Checked before the expected ending: a fault that never fired cannot have
        # caused one, and "not exercised" says what is wrong.
        t = case.target
        if fired.get(str(t.injector)):
            return None
        why = f"{t.injector} never fired on {t.scenario} with seed {case.seed}"
        return Verdict.NOT_EXERCISED, why

    def unmet_ending(self, target: Target, res: JudgedRun) -> tuple[Verdict, str] | None:
        who = f"{target.injector} on {target.scenario}"
        unmet = _unmet_expect(_fault_expect(target), who, res)
        return (Verdict.FAIL, unmet) if unmet else None

    def held(self, row: TargetOutcome) -> str:
        return _fired_detail(row.fired)


class Scenario(TargetKind):
    name = "scenario"

    def build(self, name: str, tier: str, obj: Mapping[str, Any] | None = None) -> Target:
        return Target(self, name, _resolve(self, name, tier), tier=tier)

    def unmet_ending(self, target: Target, res: JudgedRun) -> tuple[Verdict, str] | None:
        unmet = _unmet_scenario(target.scenario, res, target.tier)
        return (Verdict.FAIL, unmet) if unmet else None


class Swarm(TargetKind):
    name = "swarm"
    draws_faults = True
    replays_plan = True
    rank = 3

    def build(self, name: str, tier: str, obj: Mapping[str, Any] | None = None) -> Target:
        scenario = name if obj is None else obj.get("scenario")
        if not isinstance(scenario, str):
            raise CampaignError("swarm target needs a 'scenario' name")
        pinned = tuple((obj or {}).get("pinned") or ())
        if tier in Tiers.installed() and not Tiers.installed()[tier].fault_plans:
            raise CampaignError(f"a swarm draws in-process fault plans: --tier {tier} has none")
        _resolve(SCENARIO, scenario, tier)
        known = _fault_plans(tier).faults()
        for p in pinned:
            if p not in known:
                raise CampaignError(f"unknown fault {p!r} in --pin{close_matches(p, known)}")
        return Target(self, scenario, scenario, pinned=pinned, tier=tier)

    def plan(self, target: Target, seed: int) -> FaultPlan | None:
        return replace(swarm_plan(seed, target.scenario, target.pinned, target.tier),
                       scale=target.scale)  # fmt: skip

    def selection(self, target: Target) -> list[str]:
        pins = ["--pin", ",".join(target.pinned)] if target.pinned else []
        return ["--swarm", "--scenario", target.scenario, *pins]

    def held(self, row: TargetOutcome) -> str:
        return _fired_detail(row.fired)


REGRESSION, FAULT, SCENARIO, SWARM = Regression(), Fault(), Scenario(), Swarm()
KINDS: tuple[TargetKind, ...] = (REGRESSION, FAULT, SCENARIO, SWARM)


def kind_named(name: object) -> TargetKind:
    """The kind called ``name``; ``ValueError`` with one line for any other value."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    names = ", ".join(k.name for k in KINDS)
    raise ValueError(f"target kind must be one of {names}, got {name!r}")


def kind_of(target: Target) -> TargetKind:
    """``target``'s kind, whole: ``Target.kind`` is typed by only what a target asks of
    it (``targets.KindOfTarget``), as targets sit below kinds. Kinds compare and pickle
    by name, so the registered kind of that name is the target's own."""
    return kind_named(target.kind.name)


def regression_target(name: str, tier: str | None = None) -> Target:
    """The planted regression ``name`` on ``tier`` (one-line ``CampaignError``)."""
    return REGRESSION.build(name, tier_or_default(tier))


def fault_target(name: str, tier: str | None = None) -> Target:
    """The fault ``name`` on ``tier`` (one-line ``CampaignError``)."""
    return FAULT.build(name, tier_or_default(tier))


def scenario_target(name: str, tier: str | None = None) -> Target:
    """The plain scenario ``name`` on ``tier`` (one-line ``CampaignError``)."""
    return SCENARIO.build(name, tier_or_default(tier))


def swarm_target(scenario: str, pinned: Sequence[str] = (), tier: str | None = None) -> Target:
    """A swarm: random subsets of the in-process injectors on ``scenario``, on a tier
    whose faults are fault plans (one-line ``CampaignError`` else)."""
    return SWARM.build(
        scenario,
        tier_or_default(tier),
        {"scenario": scenario, "pinned": tuple(pinned)},
    )


def swarm_plan(
    seed: int, scenario: str, pinned: Sequence[str] = (), tier: str | None = None
) -> FaultPlan:
    """The swarm plan of one run on ``scenario``: a random subset of ``tier``'s faults
    (default: the default tier's) drawn from ``seed`` and the scenario (``pinned`` fixes
    the subset), as the tier's ``FaultPlans.swarm`` draws it."""
    return _fault_plans(tier_or_default(tier)).swarm(seed, scenario, pinned)


def _fault_plans(tier: str) -> FaultPlans:
    """``tier``'s ``FaultPlans``; one-line ``CampaignError`` for a tier without."""
    plans = Tiers.installed()[tier].plans()
    if plans is None:
        raise CampaignError(f"a swarm draws in-process fault plans: --tier {tier} has none")
    return plans


def _resolve(kind: TargetKind, name: str, tier: str) -> str:
    """The scenario ``name`` runs on with ``tier``; one-line ``CampaignError`` else."""
    try:
        return resolve(kind.name, name, tier).scenarios[tier]
    except UnknownName as exc:
        raise CampaignError(str(exc)) from None


# -- helpers of the judges ------------------------------------------------------------


def _run_command(target: Target, seed: int) -> list[str]:
    """``kvfault run`` with the options every selection shares: tier, stack, seed, scale,
    and the tier's own options as the campaign was given them."""
    tier = ["--tier", target.tier] if target.tier != default_tier() else []
    legacy = ["--legacy", target.stack] if target.stack else []
    scaled = ["--scale", str(target.scale)] if target.scale != 1 else []
    return ["kvfault", "run", *tier, *legacy, "--first-seed", str(seed), "--seeds", "1",
            *scaled, *target.options]  # fmt: skip


def _first(items: Sequence[object]) -> str:
    return f"{items[0]}" + (f" (+{len(items) - 1} more)" if len(items) > 1 else "") if items else ""


def _held_text(fired: dict[str, int]) -> str:
    if not fired:
        return "every property held"
    return "every property held; fired " + ", ".join(f"{k} x{v}" for k, v in sorted(fired.items()))


def _fired_detail(fired: dict[str, int]) -> str:
    text = "fired " + (", ".join(f"{k} x{v}" for k, v in sorted(fired.items()) if v) or "nothing")
    # A swarm row's injectors are drawn per run; one that did not fire in this row's
    # runs is named as such (never as "fired x0"). One that fired in no run of the
    # whole campaign is NOT EXERCISED, which fails the campaign.
    idle = sorted(k for k, v in fired.items() if not v)
    return text + (f"; not fired here: {', '.join(idle)}" if idle else "")


class _Recording:
    """An injector factory that remembers what it built, so a case counts only the
    firings of *its* faults (a scenario's own injectors may share a name)."""

    def __init__(self, build: Callable[[], list[Any]]):
        self.build = build
        self.made: list[list[Any]] = []

    def __call__(self) -> list[Any]:
        injs = self.build()
        self.made.append(injs)
        return injs

    def fired(self) -> dict[str, int]:
        return fired_report(self.made[0] if self.made else [])


def _unmet_expect(expect: Expect | None, who: str, res: JudgedRun) -> str | None:
    """How the run's ending differs from ``expect``, the ending ``who``'s catalog entry
    declares for the fixed stack (None: as declared). An entry that declares nothing is
    a catalog mistake, not a fault of the stack: ``UndeclaredEnding`` (the case is an
    ERROR)."""
    if expect is None:
        raise UndeclaredEnding(f"{who}: its catalog entry declares no expected ending")
    got = res.ending
    if got is None:
        return f"{who}: the run left no ending to judge"
    unmet = expect.unmet(got)
    return f"{who}: the fixed stack was {unmet}" if unmet else None


def _unmet_scenario(scenario: str, res: JudgedRun, tier: str) -> str | None:
    return _unmet_expect(scenarios_on(tier)[scenario].expect, scenario, res)


def _unmet_legacy(reg: PlantedRegression, res: JudgedRun) -> str | None:
    """How a regression's legacy run ended otherwise than its entry declares."""
    if not reg.legacy_expect:
        raise UndeclaredEnding(f"{reg.name}: its catalog entry declares no expected legacy ending")
    got = res.ending
    if got is None or all(e.unmet(got) for e in reg.legacy_expect):
        want = " or ".join(str(e) for e in reg.legacy_expect)
        return f"{reg.name}: the legacy stack was expected to {want}; it {got or 'left no ending'}"
    return None


def _fault_expect(target: Target) -> Expect | None:
    """How the fixed stack must end under ``target``'s fault: as its tier's
    ``FaultPlans`` says for a planned fault, else as its tier's fault catalog says."""
    tier = Tiers.installed()[target.tier]
    plans = tier.plans()
    if plans is None:
        return tier.fault(str(target.injector)).expect
    return plans.expect(str(target.injector))
