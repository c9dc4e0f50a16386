"""Target kinds are classes (faults/campaign/kinds.py): one place names them, each
carries its own plan, judge, command and detail, and nothing else asks a target
which kind it is by comparing strings."""

from __future__ import annotations

import ast
import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from kvfault.faults.campaign import (
    KINDS,
    CampaignError,
    Case,
    Target,
    TargetKind,
    fault_target,
    kind_named,
    regression_target,
    scenario_target,
    swarm_target,
)
from kvfault.faults.campaign.kinds import kind_of
from kvfault.faults.campaign.outcomes import TargetOutcome
from kvfault.faults.campaign.reading import target_from_json

ROOT = Path(__file__).resolve().parents[3]
NAMES = ("regression", "fault", "scenario", "swarm")


def test_the_four_kinds_are_named_once_each():
    assert tuple(k.name for k in KINDS) == NAMES
    assert len({type(k) for k in KINDS}) == len(KINDS)
    assert all(isinstance(k, TargetKind) and type(k) is not TargetKind for k in KINDS)
    for k in KINDS:
        assert kind_named(k.name) is k and str(k) == k.name
    with pytest.raises(ValueError, match="target kind must be one of regression, fault"):
        kind_named("plan")


def _targets() -> list[Target]:
    return [
        regression_target("media_keys"),
        fault_target("slow_forward"),
        scenario_target("two_images"),
        swarm_target("restart_burst", ["slow_forward"]),
    ]


def test_each_target_holds_its_kind_and_artifacts_carry_its_name():
    for t, name in zip(_targets(), NAMES, strict=True):
        assert t.kind is kind_named(name)
        obj = json.loads(json.dumps(t.as_json()))  # a plain string in JSON
        assert obj["kind"] == name and t.id.startswith(f"{name}:")
        assert target_from_json(obj) == t and target_from_json(obj).kind is t.kind
        # A case that crossed a process boundary keeps its kind (the pool pickles cases).
        assert pickle.loads(pickle.dumps(Case(t, 3))).target.kind is t.kind


def test_each_kind_answers_for_its_own_targets():
    reg, fault, scen, swarm = _targets()
    assert (reg.plan(0), scen.plan(0)) == (None, None)
    assert [f.injector for f in fault.plan(4).faults] == ["slow_forward"]
    assert "slow_forward" in [f.injector for f in swarm.plan(4).faults]
    assert reg.command(2) == "kvfault repro media_keys --seed 2"
    assert fault.command(2).endswith("--fault slow_forward")
    assert scen.command(2).endswith("--scenario two_images")
    assert swarm.command(2).endswith("--swarm --scenario restart_burst --pin slow_forward")
    assert [kind_of(t).takes_legacy_stack for t in _targets()] == [False, True, True, True]
    assert [t.kind.draws_faults for t in _targets()] == [False, False, False, True]
    assert [kind_of(t).replays_plan for t in _targets()] == [False, True, False, True]


def test_a_module_above_kinds_gets_the_targets_own_kind_whole():
    for t in _targets():
        assert kind_of(t) is t.kind and isinstance(kind_of(t), TargetKind)


class _Bare:
    """The least a target asks of its kind (``targets.KindOfTarget``) and no more."""

    name = "bare"
    draws_faults = False

    def plan(self, target: Target, seed: int) -> None:
        return None

    def command(self, target: Target, seed: int) -> str:
        return f"kvfault run --seed {seed}"


def test_a_kind_that_is_no_target_kind_fails_in_one_line_where_more_is_asked():
    t = replace(scenario_target("two_images"), kind=_Bare())
    assert t.id == "bare:two_images" and t.command(1) == "kvfault run --seed 1"
    with pytest.raises(CampaignError, match="^target kind 'bare' gives no row verdict$"):
        _ = TargetOutcome(t, []).verdict
    with pytest.raises(ValueError, match="^target kind must be one of regression, fault"):
        kind_of(t)


def test_an_unknown_kind_in_an_artifact_is_one_line():
    obj = {**scenario_target("two_images").as_json(), "kind": "plan"}
    with pytest.raises(CampaignError, match="^target kind must be one of regression, fault"):
        target_from_json(obj)


# -- no string comparisons of kinds outside the kind classes ------------------------------

# The catalog names its entries' kinds (a catalog entry is not a target); the ATOM tier
# and the vLLM tier name their rows' kinds in their catalogs and their own `kvfault list
# --tier NAME`. None asks a *target*.
_OWN_VOCABULARY = {
    "faults/catalog.py",
    "faults/commands/listing.py",
    "faults/atom/catalog.py",
    "faults/atom/command.py",
    "faults/vllm/catalog.py",
    "faults/vllm/command.py",
}


def _kind_compares(tree: ast.AST) -> list[int]:
    """Lines comparing something called ``kind`` with a target kind's name."""

    def is_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "name":
            node = node.value  # t.kind.name == "fault" is the same question
        return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
            isinstance(node, ast.Name) and node.id == "kind"
        )

    def names_a_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in NAMES
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_kind(e) for e in node.elts)
        return False

    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_kind(s) for s in sides) and any(names_a_kind(s) for s in sides):
                hits.append(node.lineno)
    return hits


def test_no_module_compares_a_kind_with_a_string_outside_the_kind_classes():
    found = {}
    for path in sorted((ROOT / "faults").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "faults/campaign/kinds.py" or rel in _OWN_VOCABULARY:
            continue
        lines = _kind_compares(ast.parse(path.read_text(), rel))
        if lines:
            found[rel] = lines
    assert found == {}, "ask the target's kind (kvfault.faults.campaign.kinds) instead"


def test_the_scan_finds_a_comparison_when_one_is_planted():
    planted = 'if t.kind == "regression":\n    pass\nok = kind in ("fault", "swarm")\n'
    planted += 'if case.target.kind.name != "swarm":\n    pass\n'
    assert _kind_compares(ast.parse(planted)) == [1, 3, 4]
    assert _kind_compares(ast.parse('if ev.kind == "dispatch":\n    pass\n')) == []


def test_a_reproduction_names_a_tier_fault_that_is_no_plan():
    # An atom or lmcache fault is its tier's own, not a plan: the header had said "no fault".
    from kvfault.faults.campaign import CaseOutcome, fault_target
    from kvfault.faults.verdicts import Verdict

    target = fault_target("wire_kill", "lmcache")
    lines = target.kind.reproduction(CaseOutcome(Case(target, 0), Verdict.PASS))
    assert lines[0] == f"replay {target.id}@seed0: {target.scenario} under wire_kill"
