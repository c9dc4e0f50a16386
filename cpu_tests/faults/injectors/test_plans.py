"""Fault plans as data (docs/design.md#faults): JSON round trip, one-line errors for bad input,
swarm plans drawn from a seed, fired reports, and hypothesis searches over plans
that find every planted regression and shrink to a small plan."""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvfault.faults import SCENARIOS
from kvfault.faults.campaign import run_case
from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.injectors.plans import (
    FaultPlan,
    FaultSpec,
    fired_report,
    not_exercised,
    swarm_plan,
)
from kvfault.faults.regressions import REGRESSIONS
from kvfault.faults.strategies import WorkloadParams, fault_plans, fault_specs, workload_params
from kvfault.reference import Ev

# Explicit settings: these tests are about the search itself, not the profile's budget.
_SEARCH = settings(
    max_examples=100,
    database=None,
    deadline=None,
    derandomize=True,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
)


# -- JSON round trip -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INJECTORS))
def test_catalog_defaults_round_trip(name: str) -> None:
    plan = FaultPlan((FaultSpec.of(name, **INJECTORS[name].defaults),), seed=11)
    assert FaultPlan.loads(plan.dumps()) == plan
    assert FaultPlan.from_json(json.loads(json.dumps(plan.as_json()))) == plan
    assert hash(plan) == hash(FaultPlan.loads(plan.dumps()))


@settings(max_examples=100, database=None, deadline=None)
@given(fault_plans())
def test_drawn_plans_round_trip_and_build(plan: FaultPlan) -> None:
    assert FaultPlan.loads(plan.dumps()) == plan
    injectors = plan.injectors()
    assert [i.name for i in injectors] == plan.names
    assert all(i.spec is not None and i.seed == plan.seed for i in injectors)


def test_params_are_canonical() -> None:
    a = FaultSpec.of("lost_completion", nth=[5], p=1)
    b = FaultSpec("lost_completion", (("p", 1.0), ("nth", (5,))))
    assert a == b and a.params == (("nth", (5,)), ("p", 1.0))
    assert a.as_json() == {"injector": "lost_completion", "params": {"nth": [5], "p": 1.0}}


# -- bad input: one clear line ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("not json", "must be JSON"),
        ("[]", "JSON object"),
        ('{"seed": "x", "faults": []}', "seed must be an integer"),
        ('{"seed": true, "faults": []}', "seed must be an integer"),
        ('{"faults": {}}', "'faults' must be a list"),
        ('{"faults": [], "sede": 1}', "unknown plan field 'sede'"),
        ('{"faults": [3]}', "fault #0 must be an object"),
        ('{"faults": [{"injector": "nope"}]}', "unknown injector 'nope'"),
        (
            '{"faults": [{"injector": "lost_completion", "params": []}]}',
            "'params' must be an object",
        ),
        ('{"faults": [{"injector": "lost_completion", "parms": {}}]}', "unknown field 'parms'"),
        (
            '{"faults": [{"injector": "lost_completion", "params": {"n": [1]}}]}',
            "unknown parameter 'n'",
        ),
        (
            '{"faults": [{"injector": "lost_completion", "params": {"nth": "5"}}]}',
            "'nth' must be a list of integers",
        ),
        (
            '{"faults": [{"injector": "lost_completion", "params": {"nth": [0]}}]}',
            "'nth' must be a list of integers",
        ),
        (
            '{"faults": [{"injector": "lost_completion", "params": {"nth": [true]}}]}',
            "'nth' must be a list of integers",
        ),
        (
            '{"faults": [{"injector": "lost_completion", "params": {"p": 2}}]}',
            "'p' must be a number in [0, 1]",
        ),
        (
            '{"faults": [{"injector": "fence_failure", "params": {"p": "high"}}]}',
            "'p' must be a number",
        ),
        (
            '{"faults": [{"injector": "engine_restart", "params": {"limit": 1.5}}]}',
            "'limit' must be an integer",
        ),
        (
            '{"faults": [{"injector": "port_zero_ids", "params": {"ports": [0, 0, 0]}}]}',
            "two ports",
        ),
        (
            '{"faults": [{"injector": "slow_forward", "params": {"forwards": [[0]]}}]}',
            "'forwards' must be a list of [forward index",
        ),
        (
            '{"faults": [{"injector": "hash_order_shuffle", "params": {"salt": "a"}}]}',
            "'salt' must be an integer or null",
        ),
    ],
)
def test_bad_plans_get_one_clear_line(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        FaultPlan.loads(text)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message and "Traceback" not in message


def test_bad_specs_in_code_get_the_same_errors() -> None:
    with pytest.raises(ValueError, match="unknown injector 'lost'; known: "):
        FaultSpec.of("lost")
    with pytest.raises(ValueError, match="unknown parameter 'bogus'"):
        FaultSpec.of("retrieve_failure", bogus=1)
    with pytest.raises(ValueError, match="delay_s"):
        FaultSpec.of("late_visibility", delay_s=0)
    with pytest.raises(ValueError, match="plan seed must be an integer"):
        FaultPlan((), seed="3")  # type: ignore[arg-type]


# -- swarm mode --------------------------------------------------------------------------------


def test_swarm_is_determined_by_its_seed() -> None:
    plans = [swarm_plan(s) for s in range(40)]
    assert plans == [swarm_plan(s) for s in range(40)]
    assert len({p.dumps() for p in plans}) > 30  # seeds draw different plans
    for seed, plan in enumerate(plans):
        assert plan.seed == seed and plan.faults
        assert FaultPlan.loads(plan.dumps()) == plan
    # every injector is drawn by some seed, and no seed draws them all at once
    assert {n for p in plans for n in p.names} == set(INJECTORS)
    assert all(len(p.faults) < len(INJECTORS) for p in plans)


def test_swarm_pins_fix_the_subset_without_shifting_the_draws() -> None:
    pins = {"lost_completion", "late_visibility"}
    for seed in range(20):
        pinned = swarm_plan(seed, pins)
        assert sorted(pinned.names) == sorted(pins)
        assert swarm_plan(seed, pins) == pinned
        free = {f.injector: f for f in swarm_plan(seed).faults}
        for spec in pinned.faults:  # a pinned injector draws what it draws unpinned
            if spec.injector in free:
                assert free[spec.injector] == spec
    with pytest.raises(ValueError, match="unknown injector 'nope' pinned"):
        swarm_plan(0, {"nope"})


def test_swarm_draws_vary_per_scenario_and_seed() -> None:
    """Issue 19: draws depended on the seed alone, so every scenario got the same
    injectors. Now a scenario and a seed make the draw, and each is repeatable."""
    from kvfault.faults.scenarios import SCENARIOS

    for seed in range(4):
        plans = {s: swarm_plan(seed, scenario=s) for s in SCENARIOS}
        assert plans == {s: swarm_plan(seed, scenario=s) for s in SCENARIOS}
        assert len({p.dumps() for p in plans.values()}) > len(SCENARIOS) // 2


def test_each_home_injector_takes_its_turn_at_its_defaults() -> None:
    """Within ``swarm_seeds_to_cover()`` consecutive seeds (any first seed), every
    injector is enabled on its catalog scenario with the catalog's defaults (where its
    fault row shows it fires), next to companions that let the run go on (none that
    stops it or refuses its start)."""
    from kvfault.faults.injectors.plans import _runs_on, home_injectors, swarm_seeds_to_cover

    n = swarm_seeds_to_cover()
    scenarios = {i.scenario for i in INJECTORS.values()}
    assert n == max(len(home_injectors(s)) for s in scenarios) > 1
    for first in (0, 5, 1000):
        anchored = set()
        for scenario in scenarios:
            homes = home_injectors(scenario)
            for seed in range(first, first + n):
                plan = swarm_plan(seed, scenario=scenario)
                anchor = homes[seed % len(homes)]
                assert FaultSpec.of(anchor, **INJECTORS[anchor].defaults) in plan.faults
                assert all(_runs_on(m) for m in plan.names if m != anchor), plan.describe()
                anchored.add(anchor)
        assert anchored == set(INJECTORS)


# -- fired report: a fault that never fired is never a pass ------------------------------------


def test_fired_report_counts_every_planned_injector() -> None:
    plan = FaultPlan(
        (FaultSpec.of("lost_completion", nth=(1,)), FaultSpec.of("retrieve_failure", nth=(2,)))
    )
    injectors = plan.injectors()
    report = fired_report(injectors)
    assert report == {"lost_completion": 0, "retrieve_failure": 0}
    assert not_exercised(report) == ["lost_completion", "retrieve_failure"]
    injectors[0].fire()
    report = fired_report(injectors)
    assert not_exercised(report) == ["retrieve_failure"]
    injectors[1].fire()
    assert not_exercised(fired_report(injectors)) == []


# -- strategies --------------------------------------------------------------------------------


@settings(max_examples=60, database=None, deadline=None)
@given(fault_specs(), workload_params())
def test_strategies_draw_valid_data(spec: FaultSpec, work: WorkloadParams) -> None:
    assert FaultSpec(spec.injector, spec.params) == spec
    assert work.scenario in SCENARIOS and 0 <= work.seed < 2**16


def test_strategies_reject_unknown_names() -> None:
    with pytest.raises(ValueError, match=r"fault_specs: unknown injector \['nope'\]"):
        fault_specs(["nope"])
    with pytest.raises(ValueError, match=r"workload_params: unknown scenario \['nope'\]"):
        workload_params(["nope"])
    # One name alone, not in a list, is said as such (not "unknown injector ['l']").
    with pytest.raises(ValueError, match="give a list of names, not the string 'lost_completion'"):
        fault_specs("lost_completion")
    with pytest.raises(ValueError, match="give a list of names, not the string 'two_servers'"):
        workload_params("two_servers")


class _Found(Exception):
    pass


def search(strategy, condition) -> tuple[object, int, int]:
    """A hypothesis search for an example meeting ``condition``: returns the shrunk
    example, the examples run until the first hit and in all (shrinking included)."""
    calls, first, found = [0], [0], [None]

    @_SEARCH
    @given(strategy)
    def probe(example) -> None:
        calls[0] += 1
        if condition(example):
            first[0] = first[0] or calls[0]
            found[0] = example
            raise _Found

    try:
        probe()
    except _Found:
        pass
    return found[0], first[0], calls[0]


@functools.cache
def _legacy_case(name: str, plan: FaultPlan):
    reg = REGRESSIONS[name]
    props = tuple(p for p in SCENARIOS[reg.scenario].properties if p != "determinism")
    return run_case(
        reg.scenario,
        plan.seed,
        rules=reg.rules,
        injectors=plan.injectors,
        properties=props,
        request_map=plan.request_map(),
    )


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_search_over_plans_finds_each_regression_and_shrinks(name: str) -> None:
    reg = REGRESSIONS[name]

    def caught(plan: FaultPlan) -> bool:
        return any(v.prop == reg.signature for v in _legacy_case(name, plan).violations)

    plan, first, total = search(fault_plans(max_faults=2, seeds=st.integers(0, 255)), caught)
    assert plan is not None, f"{name} not found in 100 examples"
    assert first <= 100
    assert isinstance(plan, FaultPlan) and len(plan.faults) <= 1 and plan.seed < 8


def test_minimal_failing_plan_shrinks_to_one_fault() -> None:
    """Which plans make a load of two_images fail (and be recomputed)? The search
    starts from plans of up to three faults and shrinks what it finds to a single
    fault that fails retrieves, with the smallest trigger that hits one."""
    quiet = [  # faults that never stop the engine: every run is a few ms
        "retrieve_failure",
        "evict_after_lookup",
        "late_visibility",
        "slow_forward",
        "fence_failure",
        "hash_order_shuffle",
    ]

    @functools.cache
    def load_failed(plan: FaultPlan) -> bool:
        res = run_case(
            "two_images",
            plan.seed,
            injectors=plan.injectors,
            properties=(),
            request_map=plan.request_map(),
        )
        assert res.run is not None
        applied = res.run.trace.of(Ev.COMPLETION_APPLIED)
        return any(e.data.get("outcome") == "failed" for e in applied)

    plan, first, total = search(fault_plans(quiet, max_faults=3, seeds=st.just(0)), load_failed)
    assert isinstance(plan, FaultPlan) and 0 < first <= total
    assert len(plan.faults) == 1, plan.describe()
    (spec,) = plan.faults
    assert spec.injector in ("retrieve_failure", "evict_after_lookup")
    assert dict(spec.params).get("p", 0.0) == 0.0 and len(dict(spec.params)["nth"]) == 1
