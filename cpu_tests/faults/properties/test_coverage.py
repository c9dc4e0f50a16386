"""Bugs are not caught by luck (issue 19): every property has something to judge in at
least two scenarios of the catalog, checked from the catalog and the runs themselves.

"Something to judge" is the input the property reads, present in the scenario's run on
seed 0 (a property listed on a scenario whose trace never gives it a case judges
nothing there). A built-in property without an entry here fails; a ``Property`` class
says its own (``judges``)."""

from __future__ import annotations

from typing import Callable

from kvfault.faults.campaign import properties_of, run_case
from kvfault.faults.properties import PROPERTIES
from kvfault.faults.runs import RunResult
from kvfault.faults.scenarios import SCENARIOS
from kvfault.faults.tiers import Tiers
from kvfault.reference.trace import Ev


def _any(kind: Ev, test: Callable[[dict], bool] = lambda d: True) -> Callable[[RunResult], bool]:
    return lambda run: any(test(e.data) for e in run.trace.of(kind))


INPUTS: dict[str, Callable[[RunResult], bool]] = {
    "correctness": _any(Ev.OUTPUT),
    "keys": _any(Ev.SENT, lambda d: d["last"] is not None),
    "identity": _any(Ev.BIND),
    "grid": _any(Ev.STATE_SAVE, lambda d: d["grid"] == "chunk"),
    "hybrid": _any(Ev.LOOKUP, lambda d: d["hybrid"] and d["claim"] > 0),
    "no_false_stop": _any(Ev.DISPATCH),
    "liveness": _any(Ev.DISPATCH),
    "efficiency": _any(Ev.LOOKUP, lambda d: d["kv_hit"] > 0),
    "load_failures": _any(Ev.RETRIEVE_TERMINAL),
    "exactly_once": _any(Ev.SAVE_DONE),
    "resources": _any(Ev.QUIESCENT),
    "hbm_owners": _any(Ev.BLOCKS, lambda d: "freed" in d),
    # Compares two runs of one seed: every deterministic run that lists it.
    "determinism": _any(Ev.OUTPUT),
}
# Properties whose input only another tier records: judged there (cpu_tests/atom runs
# them on ATOM); here, at least two of that tier's rows must list them.
OTHER_TIER = {"usage": "atom"}  # only the atom tier's outputs carry reported usage


def test_every_property_is_judged_in_at_least_two_scenarios():
    inputs = {**INPUTS, **{n: p.judges for n, p in PROPERTIES.classes.items()}}
    assert set(inputs) | set(OTHER_TIER) == {*PROPERTIES, "determinism"}, (
        "a property without an input check"
    )
    memory = [SCENARIOS[r.name] for r in Tiers.installed()["memory"].rows("scenario")]
    runs = {s.name: run_case(s.name, 0, properties=[]).run for s in memory}
    judged = {
        prop: sorted(
            s.name for s in memory if prop in properties_of(s.name) and inputs[prop](runs[s.name])
        )
        for prop in inputs
    }
    thin = {p: names for p, names in judged.items() if len(names) < 2}
    assert not thin, f"properties judged in fewer than two scenarios: {thin}"


def test_a_property_only_another_tier_records_is_listed_on_its_rows():
    from kvfault.faults.atom.catalog import SCENARIOS as ATOM_SCENARIOS

    for prop, tier in OTHER_TIER.items():
        assert tier == "atom"
        listing = [s.name for s in ATOM_SCENARIOS.values() if prop in s.properties]
        assert len(listing) >= 2, (prop, listing)
        assert not any(prop in s.properties for s in SCENARIOS.values()), prop


def test_the_input_checks_can_say_no():
    """A check that holds for any run would make the count above meaningless."""
    bare = run_case("two_servers", 0, properties=[]).run  # dense, two tiers, no hybrid
    assert not INPUTS["hybrid"](bare) and not INPUTS["grid"](bare)
    assert INPUTS["identity"](bare) and not INPUTS["identity"](
        run_case("hbm_pressure", 0, properties=[]).run
    )
