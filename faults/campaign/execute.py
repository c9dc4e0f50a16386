"""Run one case (a scenario, a seed, a rule set, injectors) on a tier and judge it.

The tier is a parameter: an ``Executor`` builds a run's context and runs the scenario
on its tier (in this process in virtual time, or on a real system in real time; given
none, a run gets the default tier's, ``default_executor``). Everything else -- the
property list, the checks, the fired count -- is the same.

The determinism property needs two runs: on a deterministic executor the case runs
its scenario twice with fresh injectors and compares trace digests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from kvfault.faults.catalog import UnknownName
from kvfault.faults.injectors.plans import fired_report, not_exercised
from kvfault.faults.properties.checks import PROPERTIES, Violation
from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import Ending, Injector, RunContext, RunResult
from kvfault.faults.scenarios import SCENARIOS
from kvfault.faults.tiers import Executor, Tiers, TierScenario
from kvfault.reference.rules import Rules
from kvfault.reference.types import Request

InjectorFactory = Callable[[], Sequence[Injector]]
RequestMap = Callable[[Request], Request]


def default_executor() -> Executor:
    """The executor a run gets when none is given: a fresh one of the default tier's,
    which needs nothing started (``kvfault.faults.tiers.Tier.executor``)."""
    return Tiers.installed().default.new_executor()


@dataclass
class JudgedRun:
    """One run judged (``run_case``): the properties checked and the ``Violation``s
    they returned, its stop and ending, what fired, and the run itself until it is let
    go (``drop_run``). A case has one, or two for a regression (legacy and fixed); its
    record, ``kvfault.faults.campaign.outcomes.CaseOutcome``, keeps them for a timeline."""

    scenario: str
    seed: int
    checked: list[str]
    violations: list[Violation]
    sim_seconds: float
    wall_seconds: float
    stop: str | None
    fired: dict[str, int] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)
    run: RunResult | None = None
    ending: Ending | None = None  # kept when ``run`` is dropped (a cached fixed run)
    _digest: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """No property was violated (whether the faults fired: ``not_exercised``)."""
        return not self.violations

    @property
    def not_exercised(self) -> list[str]:
        """The planned faults that never fired in this run (sorted)."""
        return not_exercised(self.fired)

    @property
    def digest(self) -> str:
        """The judged run's trace digest. Computed when first asked for: nothing reads
        a regression's legacy digest, and digesting a long trace costs as much as
        checking it. Kept when the run is dropped (``drop_run``)."""
        if self._digest is None:
            self._digest = self.run.trace.digest() if self.run is not None else ""
        return self._digest

    def drop_run(self, keep_digest: bool = True) -> None:
        """Let the run go (a cache that outlives its case), keeping its digest unless
        told not to (then ``digest`` is empty)."""
        if keep_digest:
            self._digest = self.digest
        self.run = None


def scenarios_on(tier: str) -> Mapping[str, TierScenario]:
    """The scenario catalog of ``tier``: its own when it declares one
    (``kvfault.faults.tiers.Tier.scenarios``), else the shared ``SCENARIOS``."""
    tiers = Tiers.installed()
    return tiers[tier].scenario_catalog() if tier in tiers else SCENARIOS


def _known(name: str, executor: Executor) -> None:
    # Any executor runs any scenario of its tier's catalog; a scenario's ``tiers`` say
    # where the campaign selects it (the catalog answers a CLI name on the wrong tier).
    known = scenarios_on(executor.tier)
    if name not in known:
        raise UnknownName(f"unknown scenario {name!r}; known: {', '.join(known)}")


def _known_properties(names: Sequence[str]) -> None:
    # A misspelt property would check nothing and pass: refuse it.
    known = [*PROPERTIES, Prop.DETERMINISM]
    for n in names:
        if n not in known:
            raise UnknownName(f"unknown property {n!r}; known: {', '.join(known)}")


def run_scenario(
    name: str,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: InjectorFactory = lambda: (),
    request_map: RequestMap | None = None,
    executor: Executor | None = None,
    scale: int = 1,
) -> RunResult:
    """One run of scenario ``name`` with ``seed`` at ``scale`` (``RunContext.scale``) on
    ``executor``'s tier (default: the default tier's, ``default_executor``)."""
    executor = executor or default_executor()
    _known(name, executor)
    ctx = RunContext(seed=seed, rules=rules or Rules(), injectors=list(injectors()), scale=scale)
    if request_map is not None:
        ctx.request_map = request_map
    return executor.execute(name, ctx)[0]


def properties_of(name: str, executor: Executor | None = None) -> list[str]:
    """The properties a run of ``name`` is judged by on ``executor``'s tier: all of the
    scenario's (in its tier's catalog; for a shared scenario, with the ``Property``
    classes that name it), less ``determinism`` where the tier is not deterministic,
    and only those the executor's ``judged_by`` names, if it does (default: the
    default tier's executor, ``default_executor``)."""
    executor = executor or default_executor()
    deterministic = executor.deterministic
    known = scenarios_on(executor.tier)
    judged = executor.judged_by
    own = list(known[name].properties)
    added = PROPERTIES.added_to(name) if known is SCENARIOS else []
    return [
        p
        for p in [*own, *(p for p in added if p not in own)]
        if (deterministic or p != Prop.DETERMINISM) and (judged is None or p in judged)
    ]


def check(run: RunResult, properties: Sequence[str]) -> list[Violation]:
    out: list[Violation] = []
    for prop in properties:
        if prop in PROPERTIES:
            out.extend(PROPERTIES[prop](run))
    return out


def _same_events(a: RunResult, b: RunResult) -> bool:
    """Whether two runs recorded equal events (then their digests are equal too, and
    the re-run need not be digested); False when unsure."""
    try:
        return a.trace.events == b.trace.events
    except (TypeError, ValueError, RuntimeError):  # data that does not compare plainly
        return False


def run_case(
    name: str,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: InjectorFactory = lambda: (),
    properties: Sequence[str] | None = None,
    request_map: RequestMap | None = None,
    replay_map: RequestMap | None = None,
    executor: Executor | None = None,
    scale: int = 1,
) -> JudgedRun:
    """Run and judge one case at ``scale`` on ``executor``'s tier (default: the default
    tier's, ``default_executor``).
    ``replay_map`` (default: ``request_map``) is used for the determinism re-run, so a
    hash-order shuffle can compare two salts."""
    executor = executor or default_executor()
    _known(name, executor)
    if properties is not None:
        _known_properties(properties)
    # None: the scenario's own properties; an empty list judges none (a bare run).
    props = list(properties) if properties is not None else list(properties_of(name, executor))
    if not executor.deterministic:
        props = [p for p in props if p != Prop.DETERMINISM]

    def once(mapping: RequestMap | None) -> tuple[RunResult, dict[str, object]]:
        ctx = RunContext(
            seed=seed, rules=rules or Rules(), injectors=list(injectors()), scale=scale
        )
        if mapping is not None:
            ctx.request_map = mapping
        return executor.execute(name, ctx)

    t0 = time.perf_counter()
    run, tier_notes = once(request_map)
    wall = time.perf_counter() - t0
    violations = check(run, props)
    if Prop.DETERMINISM in props:
        again, _ = once(replay_map or request_map)
        if not _same_events(run, again):
            digest, other = run.trace.digest(), again.trace.digest()
            if other != digest:
                violations.append(
                    Violation(
                        Prop.DETERMINISM,
                        f"same seed, different traces ({digest[:12]} vs {other[:12]})",
                    )
                )
    return JudgedRun(
        scenario=name,
        seed=seed,
        checked=props,
        violations=violations,
        sim_seconds=run.sim_seconds,
        wall_seconds=wall,
        stop=run.stop_line,
        fired=fired_report(run.injectors),
        notes={**run.notes, **tier_notes},
        run=run,
        ending=run.ending,
    )
