"""Scenario scale (``RunContext.scale``): a scaled scenario is K times the size and still
holds every property; the scale travels through the runner, fault plans, campaign
targets, the CLI and the pytest plugin; bad scales are one clear error."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfault.faults import SCENARIOS, RunContext
from kvfault.faults.argtypes import MAX_SCALE, check_scale, scales
from kvfault.faults.campaign import run_case, run_scenario, scenario_target, select_targets
from kvfault.faults.campaign.reading import target_from_json
from kvfault.faults.injectors import INJECTORS, FaultPlan, FaultSpec
from kvfault.reference import Ev

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]
SCALED = [name for name, s in SCENARIOS.items() if s.scales]


def _restores(run) -> int:
    """Loads dispatched after the last restart (the burst's restores)."""
    restart = max(i for i, e in enumerate(run.trace.events) if e.kind is Ev.RESTART)
    return sum(1 for e in run.trace.events[restart:] if e.kind is Ev.DISPATCH)


def test_the_burst_scenarios_say_what_grows():
    assert {"restart_burst", "lost_completion_burst", "restart_tier_kept"} <= set(SCALED)


def test_scale_multiplies_the_restart_burst():
    one = run_scenario("restart_burst", 0)
    three = run_scenario("restart_burst", 0, scale=3)
    assert _restores(one) == 64
    assert _restores(three) == 3 * 64
    assert len(three.requests) == 3 * len(one.requests)


@pytest.mark.parametrize("name", SCALED)
def test_a_scaled_scenario_holds_every_property(name):
    res = run_case(name, 1, scale=2)
    assert res.ok, [str(v) for v in res.violations]
    assert res.checked == list(SCENARIOS[name].properties)
    if name == "lost_completion_burst":  # the lost load still stops the engine
        assert res.stop and "LoadNotTerminal" in res.stop


# -- bad values -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, MAX_SCALE + 1, 2.0, "2", True, None])
def test_bad_scales_are_refused_with_one_line(bad):
    with pytest.raises(ValueError) as exc:
        check_scale(bad)
    assert "\n" not in str(exc.value) and "scale" in str(exc.value)
    with pytest.raises(ValueError):
        SCENARIOS["two_images"].run(RunContext(scale=bad))
    with pytest.raises(ValueError):
        FaultPlan((), 0, bad)


def test_a_list_of_scales_reads_each_as_a_scale():
    """The benchmarks' ``--scales``: each part is a scale, blanks between commas are
    skipped, and an empty list or one bad part is one line."""
    assert scales("1, 4,,16") == [1, 4, 16]
    for bad in ("", " , ", "1,0", f"4,{MAX_SCALE + 1}", "1,x"):
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            scales(bad)
        assert "\n" not in str(exc.value) and "scale" in str(exc.value)


@pytest.mark.parametrize(
    "obj, message",
    [
        ({"seed": 0, "faults": [], "scale": 0}, "scale must be from 1 to 256, got 0"),
        ({"seed": 0, "faults": [], "scale": "4"}, "scale must be a whole number"),
        ({"seed": 0, "faults": [], "scale": 1000}, "scale must be from 1 to 256, got 1000"),
    ],
)
def test_a_plan_with_a_bad_scale_is_one_clear_error(obj, message):
    with pytest.raises(ValueError, match=message):
        FaultPlan.from_json(obj)


def test_a_target_with_a_bad_scale_is_one_clear_error():
    from kvfault.faults.campaign import CampaignError

    with pytest.raises(CampaignError, match="target scale must be from 1 to 256, got 0"):
        target_from_json({"kind": "scenario", "name": "restart_burst", "scale": 0})
    with pytest.raises(CampaignError, match="scale must be from 1"):
        select_targets(scenarios=["restart_burst"], scale=0)


# -- the scale travels --------------------------------------------------------------------


def test_a_plan_round_trips_its_scale_and_a_default_plan_reads_as_before():
    spec = FaultSpec.of("slow_forward", **INJECTORS["slow_forward"].defaults)
    plan = FaultPlan((spec,), 5, 4)
    back = FaultPlan.loads(plan.dumps())
    assert back == plan and back.scale == 4
    assert "scale 4" in plan.describe()
    assert "scale" not in FaultPlan((spec,), 5).as_json()


def test_a_target_carries_its_scale_into_its_id_plan_command_and_json():
    t = select_targets(faults=["slow_forward"], scale=3)[0]
    assert t.scale == 3 and t.id == "fault:slow_forward-x3"
    assert t.plan(0).scale == 3
    assert "--scale 3" in t.command(0)
    assert target_from_json(json.loads(json.dumps(t.as_json()))) == t
    plain = scenario_target("restart_burst")
    assert "scale" not in plain.as_json() and "--scale" not in plain.command(0)
    reg = select_targets(regressions=["load_bound_without_restart"], scale=2)[0]
    assert reg.command(0) == (
        "kvfault run --first-seed 0 --seeds 1 --scale 2 --regression load_bound_without_restart"
    )


def kvfault(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("bad", ["0", "257", "two", "1.5"])
def test_kvfault_run_refuses_a_bad_scale_in_one_line(bad):
    out = kvfault("run", "--scenario", "restart_burst", "--scale", bad)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"kvfault: error: argument --scale: a scale is a whole number from 1 to 256, got '{bad}'"
    ]


def test_kvfault_run_scales_a_scenario():
    out = kvfault("run", "--scenario", "restart_burst", "--scale", "2", "--seeds", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "restart_burst x2" in out.stdout and "PASS" in out.stdout


def test_the_plugin_scales_the_plan_and_kv_scenario(pytester):
    pytester.makepyfile(
        test_user=textwrap.dedent(
            """
            from kvfault.reference import Ev

            def test_scaled(fault_plan, kv_scenario):
                assert fault_plan.scale == 2
                res = kv_scenario("small_restart_burst")
                assert res.ok
                # 4 stored, then 4 restores and 1 cold prompt, each times 2
                assert sum(e.kind is Ev.ARRIVE for e in res.run.trace.events) == 2 * 9
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--kv-scale", "2")
    result.assert_outcomes(passed=1)


def test_the_plugin_refuses_a_bad_scale(pytester):
    pytester.makepyfile(test_user="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--kv-scale", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--kv-scale: a scale is a whole number from 1 to 256, got '0'"])
