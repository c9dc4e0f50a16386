"""The campaign (faults/campaign/runner.py): targets, verdicts, and what makes it fail."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.faults import SCENARIOS
from kvfault.faults import campaign as cm
from kvfault.faults.campaign import (
    CampaignError,
    CampaignResult,
    Case,
    CaseOutcome,
    CaseRunner,
    Target,
    TargetOutcome,
    run_campaign,
    select_targets,
)
from kvfault.faults.campaign.outcomes import CampaignFailure
from kvfault.faults.campaign.reading import row_from_json, target_from_json
from kvfault.faults.injectors import INJECTORS
from kvfault.faults.properties import PROPERTIES, Violation
from kvfault.faults.regressions import REGRESSIONS, Regression
from kvfault.faults.runs import stops
from kvfault.faults.tiers import Tiers
from kvfault.faults.verdicts import Verdict
from kvfault.reference import Rules

ROOT = Path(__file__).resolve().parents[3]


# -- selection ---------------------------------------------------------------------------


def test_default_campaign_covers_every_regression_injector_and_scenario():
    ids = [t.id for t in select_targets()]
    assert ids == (
        [f"regression:{n}" for n in REGRESSIONS]
        + [f"fault:{n}" for n in INJECTORS]
        + [f"scenario:{r.name}" for r in Tiers.installed()["memory"].rows("scenario")]
    )


def test_naming_a_group_runs_only_what_is_named():
    ts = select_targets(regressions=["media_keys"], faults=["slow_forward"])
    assert [t.id for t in ts] == ["regression:media_keys", "fault:slow_forward"]
    assert [t.id for t in select_targets(scenarios=["two_images"])] == ["scenario:two_images"]
    # a name given twice runs once
    assert len(select_targets(regressions=["media_keys", "media_keys"])) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"regressions": ["media_key"]},
            "unknown regression 'media_key' (did you mean: media_keys?)",
        ),
        ({"faults": ["slow"]}, "unknown fault 'slow' (did you mean: slow_forward"),
        ({"scenarios": ["nope"]}, "unknown scenario 'nope'"),
        ({"pinned": ["slow_forward"]}, "--pin only makes sense with --swarm"),
        ({"swarm": True, "faults": ["slow_forward"]}, "--swarm draws its faults"),
        ({"swarm": True, "pinned": ["nope"]}, "unknown fault 'nope' in --pin"),
    ],
)
def test_bad_selection_is_one_clear_error(kwargs, message):
    with pytest.raises(CampaignError) as exc:
        select_targets(**kwargs)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_swarm_targets_draw_their_plan_from_the_seed():
    (swarm,) = [
        t for t in select_targets(scenarios=["restart_burst"], swarm=True) if t.kind.draws_faults
    ]
    assert swarm.plan(3) == swarm.plan(3)
    pinned = cm.swarm_target("restart_burst", ("lost_completion",))
    assert [f.injector for f in pinned.plan(0).faults] == ["lost_completion"]
    assert pinned.command(4) == (
        "kvfault run --first-seed 4 --seeds 1 --swarm --scenario restart_burst --pin lost_completion"
    )


def test_targets_round_trip_through_json_and_name_their_replay_command():
    for t in select_targets(swarm=False) + [cm.swarm_target("two_images", ("slow_forward",))]:
        assert target_from_json(json.loads(json.dumps(t.as_json()))) == t
    assert cm.regression_target("media_keys").command(2) == "kvfault repro media_keys --seed 2"
    assert cm.fault_target("slow_forward").command(1) == (
        "kvfault run --first-seed 1 --seeds 1 --fault slow_forward"
    )
    with pytest.raises(CampaignError, match="target kind"):
        target_from_json({"kind": "bogus", "name": "x"})


# -- judging cases -----------------------------------------------------------------------


def test_a_regression_case_is_fixed_when_legacy_fails_with_its_signature():
    out = CaseRunner().run(Case(cm.regression_target("hybrid_last_chunk"), 0))
    assert out.verdict == Verdict.FIXED and out.ok
    assert out.signature.startswith("hybrid: ")
    assert out.legacy_violations and not out.violations
    assert out.legacy_result is None  # a passing case keeps no runs by default


def test_fixed_runs_are_shared_between_a_regression_and_its_scenario(monkeypatch):
    calls = []
    real = cm.CaseRunner.fixed

    def counting(self, scenario, seed, scale=1, stack=None):
        calls.append((scenario, seed, (scenario, seed, scale, None) in self._fixed))
        return real(self, scenario, seed, scale, stack)

    monkeypatch.setattr(cm.CaseRunner, "fixed", counting)
    targets = [
        cm.regression_target("hybrid_last_chunk"),
        cm.scenario_target("chunk_aligned_hybrid"),
    ]
    result = run_campaign(targets, [0])
    assert result.ok
    assert calls == [("chunk_aligned_hybrid", 0, False), ("chunk_aligned_hybrid", 0, True)]


def test_a_regression_that_legacy_does_not_show_is_not_reproduced(monkeypatch):
    fake = Regression(
        "no_op", "legacy rules equal to the fixed ones", "chunk_aligned_hybrid", "hybrid", Rules()
    )
    # Declared as a real entry is (a missing declaration is an ERROR of its own).
    fake = dataclasses.replace(fake, legacy_expect=REGRESSIONS["hybrid_last_chunk"].legacy_expect)
    monkeypatch.setitem(REGRESSIONS, "no_op", fake)
    t = TargetOutcome(
        cm.regression_target("no_op"), [CaseRunner().run(Case(cm.regression_target("no_op"), 0))]
    )
    assert t.cases[0].verdict == Verdict.NOT_REPRODUCED
    assert "legacy passed every property" in t.cases[0].signature
    assert t.verdict == "NOT REPRODUCED" and not t.ok


def test_a_regression_caught_by_another_property_is_not_caught(monkeypatch):
    reg = REGRESSIONS["hybrid_last_chunk"]
    monkeypatch.setitem(
        REGRESSIONS, "hybrid_last_chunk", dataclasses.replace(reg, signature="keys")
    )
    out = CaseRunner().run(Case(cm.regression_target("hybrid_last_chunk"), 0))
    assert out.verdict == Verdict.NOT_REPRODUCED
    assert "not with its signature keys" in out.signature


def test_a_fixed_stack_that_fails_is_still_failing(monkeypatch):
    monkeypatch.setitem(
        PROPERTIES, "hybrid", lambda run: [Violation("hybrid", "planted", "load:x#1", 1.0)]
    )
    out = CaseRunner().run(Case(cm.regression_target("hybrid_last_chunk"), 0))
    assert out.verdict == Verdict.STILL_FAILING and not out.ok
    assert out.signature.startswith("hybrid: planted [load:x#1]")
    assert out.fixed_result is not None  # kept for a timeline


def test_a_fault_that_never_fires_is_not_exercised(monkeypatch):
    info = INJECTORS["lost_completion"]
    # 64th load report on a scenario with far fewer loads: it can never fire.
    monkeypatch.setitem(
        INJECTORS,
        "lost_completion",
        dataclasses.replace(info, scenario="chunk_aligned_hybrid", defaults={"nth": (64,)}),
    )
    out = CaseRunner().run(Case(cm.fault_target("lost_completion"), 0))
    assert out.verdict == Verdict.NOT_EXERCISED and not out.ok
    assert out.fired == {"lost_completion": 0}
    assert "never fired" in out.signature


def test_a_fault_must_stop_with_the_error_its_catalog_names(monkeypatch):
    info = INJECTORS["retrieve_failure"]  # the fixed stack recovers from it: no stop
    monkeypatch.setitem(
        INJECTORS,
        "retrieve_failure",
        dataclasses.replace(info, expect=stops("TransferUnprovable", "load", within_s=51.0)),
    )
    out = CaseRunner().run(Case(cm.fault_target("retrieve_failure"), 0))
    assert out.verdict == Verdict.FAIL
    assert "expected to stop with TransferUnprovable on a load within 51s; it ran to the end" in (
        out.signature
    )


def test_a_crashing_case_is_an_error_and_the_campaign_goes_on(monkeypatch):
    def boom(ctx):
        raise RuntimeError("scenario exploded")

    monkeypatch.setitem(
        SCENARIOS, "two_images", dataclasses.replace(SCENARIOS["two_images"], run=boom)
    )
    result = run_campaign(
        [cm.scenario_target("two_images"), cm.regression_target("hybrid_last_chunk")], [0]
    )
    first, second = result.targets
    assert (
        first.verdict == Verdict.ERROR
        and first.cases[0].signature == "RuntimeError: scenario exploded"
    )
    assert "Traceback" in first.cases[0].error
    assert second.verdict == "FIXED"
    assert not result.ok


@pytest.mark.parametrize("name", list(INJECTORS))
def test_every_injector_fires_and_the_fixed_stack_holds(name):
    """The campaign's fault half, seed 0: each injector on its own scenario."""
    out = CaseRunner().run(Case(cm.fault_target(name), 0))
    assert out.verdict == Verdict.PASS, out.signature
    assert out.fired.get(name, 0) > 0


# -- aggregation ------------------------------------------------------------------------


def _outcome(target: Target, seed: int, verdict: str, **kw) -> CaseOutcome:
    return CaseOutcome(Case(target, seed), verdict, **kw)


def test_a_regression_caught_on_some_seeds_is_caught_and_says_where_it_missed():
    t = cm.regression_target("restart_numbering_in_hash_order")
    out = TargetOutcome(t, [_outcome(t, 0, Verdict.FIXED), _outcome(t, 1, Verdict.NOT_REPRODUCED)])
    assert out.verdict == "FIXED" and out.ok
    assert out.detail() == "no_false_stop caught on 1/2 seeds (missed: 1)"


def test_the_worst_case_decides_a_target():
    t = cm.fault_target("slow_forward")
    assert (
        TargetOutcome(
            t, [_outcome(t, 0, Verdict.PASS), _outcome(t, 1, Verdict.NOT_EXERCISED)]
        ).verdict
        == Verdict.NOT_EXERCISED
    )
    assert (
        TargetOutcome(t, [_outcome(t, 0, Verdict.FAIL), _outcome(t, 1, Verdict.ERROR)]).verdict
        == Verdict.ERROR
    )
    r = cm.regression_target("media_keys")
    assert (
        TargetOutcome(
            r, [_outcome(r, 0, Verdict.FIXED), _outcome(r, 1, Verdict.STILL_FAILING)]
        ).verdict
        == Verdict.STILL_FAILING
    )


def test_a_swarm_injector_enabled_but_never_fired_fails_the_campaign():
    t = cm.swarm_target("restart_burst", ("slow_forward", "lost_completion"))
    runs = [
        _outcome(t, 0, Verdict.PASS, fired={"slow_forward": 2, "lost_completion": 0}),
        _outcome(t, 1, Verdict.PASS, fired={"slow_forward": 1, "lost_completion": 0}),
    ]
    result = CampaignResult([TargetOutcome(t, runs)])
    assert result.unexercised == ["lost_completion"]
    # A pinned swarm draws nothing: "no swarm run drew X" would be false of it.
    assert result.never_drawn == [] and not result.draws
    assert not result.ok


def test_a_campaign_cut_short_claims_no_injector_never_fires():
    t = cm.swarm_target("restart_burst", ("slow_forward", "lost_completion"))
    runs = [_outcome(t, 0, Verdict.PASS, fired={"slow_forward": 2, "lost_completion": 0})]
    cut = CampaignFailure("interrupted", Verdict.ERROR, "interrupted by SIGINT: 9 of 10 ...")
    result = CampaignResult([TargetOutcome(t, runs)], stopped=[cut])
    assert result.unexercised == ["lost_completion"]  # in the runs that ran
    assert [f.kind for f in result.failures] == ["interrupted"]  # but not claimed


def test_a_drawing_swarm_names_the_injectors_none_of_its_runs_drew():
    t = cm.swarm_target("restart_burst")
    runs = [_outcome(t, s, Verdict.PASS) for s in (0, 1)]
    drawn = {f.injector for s in (0, 1) for f in Case(t, s).plan().faults}  # type: ignore[union-attr]
    result = CampaignResult([TargetOutcome(t, runs)])
    assert result.draws and result.never_drawn == sorted(set(INJECTORS) - drawn)
    assert result.never_drawn  # two runs draw some of the injectors, not all


def test_outcomes_round_trip_through_json():
    t = cm.fault_target("slow_forward")
    out = TargetOutcome(
        t, [_outcome(t, 0, Verdict.PASS, fired={"slow_forward": 4}, stop=None, digest="ab")]
    )
    back = row_from_json(json.loads(json.dumps(out.as_json())))
    assert back.as_json() == out.as_json()


# -- scale-out ------------------------------------------------------------------------------


def test_kvfault_run_spreads_targets_over_xdist_workers(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvfault.faults.cli", "run", "-n", "2", "--seeds", "1",
         "--regression", "hybrid_last_chunk", "--fault", "fence_failure", "--report", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "regression  hybrid_last_chunk" in proc.stdout and "FIXED" in proc.stdout
    assert "fault       fence_failure" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["meta"]["campaign"]["ok"] is True
    assert [c["id"] for c in summary["cases"]] == [
        "regression:hybrid_last_chunk@seed0",
        "fault:fence_failure@seed0",
    ]
    assert not (tmp_path / "artifacts").exists()  # a green campaign leaves no artifacts


def test_a_cached_fixed_run_keeps_its_digest_when_its_run_is_dropped():
    """The campaign's cache of fixed runs lets each passing run go; its digest, taken
    when first asked for, stays (and is the trace's)."""
    from kvfault.faults.campaign import CaseRunner, run_case

    kept = run_case("two_servers", 3)
    cached = CaseRunner().fixed("two_servers", 3)
    assert cached.run is None and kept.run is not None
    assert cached.digest == kept.digest == kept.run.trace.digest() != ""


def test_without_digests_a_campaign_judges_the_same_and_digests_nothing():
    """``kvfault run`` without --report digests no trace (only summary.json shows a
    digest); every verdict and signature is what a digesting run gives."""
    from kvfault.faults.campaign import run_campaign, select_targets

    targets = select_targets(["media_keys"], ["fence_failure"], ["two_images"])
    plain = run_campaign(targets, [0, 1])
    lean = run_campaign(targets, [0, 1], digests=False)
    assert [c.digest for c in lean.cases] == [""] * 6
    assert all(len(c.digest) == 64 for c in plain.cases)

    def judged(result):
        return [(c.case.id, c.verdict, c.signature, c.violations) for c in result.cases]

    assert judged(lean) == judged(plain) and lean.ok


def test_a_default_swarm_fires_every_injector_and_passes(capsys, tmp_path):
    """Issue 19: ``kvfault run --swarm`` with its defaults was red on the healthy stack
    (7 of 14 injectors never drawn). Now every injector fires in some run and it exits 0."""
    from kvfault.faults import cli
    from kvfault.faults.injectors.catalog import INJECTORS

    code = cli.main(["run", "--swarm", "--no-progress", "--report", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "NOT EXERCISED" not in out and "no swarm run drew" not in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    fired = {
        name
        for t in summary["meta"]["campaign"]["targets"]
        if t["target"]["kind"] == "swarm"
        for name, count in t["fired"].items()
        if count
    }
    assert fired == set(INJECTORS)
