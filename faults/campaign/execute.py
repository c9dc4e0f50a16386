"""Run one case (a scenario, a seed, a rule set, a fault plan) and judge it.

The determinism property needs two runs: the case runs its scenario twice with fresh
injectors and compares trace digests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from faults.injectors.base import Injector
from faults.properties.checks import PROPERTIES, Violation
from faults.runs import RunContext, RunResult
from faults.scenarios import SCENARIOS
from reference.rules import Rules
from reference.types import Request

InjectorFactory = Callable[[], Sequence[Injector]]


@dataclass
class CaseResult:
    scenario: str
    seed: int
    checked: list[str]
    violations: list[Violation]
    sim_seconds: float
    wall_seconds: float
    digest: str
    stop: str | None
    fired: dict[str, int] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)
    run: RunResult | None = None

    @property
    def ok(self) -> bool:
        return not self.violations


def run_scenario(
    name: str,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: InjectorFactory = lambda: (),
    request_map: Callable[[Request], Request] | None = None,
    scale: int = 1,
) -> RunResult:
    """Run scenario ``name`` once at ``scale`` (``RunContext.scale``)."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    ctx = RunContext(seed=seed, rules=rules or Rules(), injectors=list(injectors()), scale=scale)
    if request_map is not None:
        ctx.request_map = request_map
    return SCENARIOS[name].run(ctx)


def check(run: RunResult, properties: Sequence[str]) -> list[Violation]:
    out: list[Violation] = []
    for prop in properties:
        if prop in PROPERTIES:
            out.extend(PROPERTIES[prop](run))
    return out


def run_case(
    name: str,
    seed: int = 0,
    rules: Rules | None = None,
    injectors: InjectorFactory = lambda: (),
    properties: Sequence[str] | None = None,
    request_map: Callable[[Request], Request] | None = None,
    replay_map: Callable[[Request], Request] | None = None,
    scale: int = 1,
) -> CaseResult:
    """Run and judge one case at ``scale``. ``replay_map`` (default: ``request_map``)
    is used for the determinism re-run, so a hash-order shuffle can compare two salts."""
    scenario = SCENARIOS[name]
    props = list(properties or scenario.properties)
    t0 = time.perf_counter()
    run = run_scenario(name, seed, rules, injectors, request_map, scale)
    wall = time.perf_counter() - t0
    violations = check(run, props)
    digest = run.trace.digest()
    if "determinism" in props:
        again = run_scenario(name, seed, rules, injectors, replay_map or request_map, scale)
        if again.trace.digest() != digest:
            violations.append(
                Violation(
                    "determinism",
                    f"same seed, different traces ({digest[:12]} vs {again.trace.digest()[:12]})",
                )
            )
    fired: dict[str, int] = {}
    for inj in run.injectors:
        fired[inj.name] = fired.get(inj.name, 0) + inj.fired
    stop = run.stop
    return CaseResult(
        scenario=name,
        seed=seed,
        checked=props,
        violations=violations,
        sim_seconds=run.sim_seconds,
        wall_seconds=wall,
        digest=digest,
        stop=(f"{type(stop).__name__}: {stop}" if stop else run.startup_error),
        fired=fired,
        notes=dict(run.notes),
        run=run,
    )
