"""Hypothesis strategies for fault plans and workloads (docs/design.md#faults, docs/design.md#interfaces).

Everything drawn here is plain data (``FaultSpec``, ``FaultPlan``, ``WorkloadParams``)
whose parameters come from the injector catalog's schema (``kvfault.faults.injectors.catalog.INJECTORS``),
so a new injector is drawable as soon as it is registered. Draws shrink toward the
simplest case: no faults, seed 0, the first scenario, each injector's catalog defaults
(the parameters known to make it fire in its own scenario).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from hypothesis import strategies as st

from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.injectors.plans import FaultPlan, FaultSpec

SEEDS = st.integers(min_value=0, max_value=2**16 - 1)


def _spec_for(name: str) -> st.SearchStrategy[FaultSpec]:
    info = INJECTORS[name]
    # Each parameter is either left at the catalog default (the simplest choice, which
    # a shrink falls back to) or drawn.
    choices = {
        key: st.none() | param.values().map(lambda v: (v,))
        for key, param in sorted(info.params.items())
    }

    def build(drawn: dict[str, Any]) -> FaultSpec:
        params = dict(info.defaults)
        params.update({k: v[0] for k, v in drawn.items() if v is not None})
        return FaultSpec.of(name, **params)

    return st.fixed_dictionaries(choices).map(build)


def _names(who: str, names: Sequence[str] | None, known: Mapping[str, Any]) -> list[str]:
    # A bare string is a sequence of letters: name it as the mistake it is.
    if isinstance(names, str):
        raise ValueError(f"{who}: give a list of names, not the string {names!r}")
    return list(names) if names is not None else list(known)


def fault_specs(names: Sequence[str] | None = None) -> st.SearchStrategy[FaultSpec]:
    """One fault of any injector in ``names`` (default: every registered injector)."""
    pool = _names("fault_specs", names, INJECTORS)
    unknown = [n for n in pool if n not in INJECTORS]
    if unknown or not pool:
        raise ValueError(f"fault_specs: unknown injector {unknown[:1] or pool!r}")
    return st.one_of([_spec_for(n) for n in pool])


def fault_plans(
    names: Sequence[str] | None = None,
    max_faults: int = 3,
    seeds: st.SearchStrategy[int] = SEEDS,
) -> st.SearchStrategy[FaultPlan]:
    """A plan of up to ``max_faults`` faults (at most one per injector) and its seed;
    shrinks toward the empty plan with seed 0."""
    specs = st.lists(fault_specs(names), max_size=max_faults, unique_by=lambda s: s.injector)
    return st.builds(lambda fs, seed: FaultPlan(tuple(fs), seed), specs, seeds)


@dataclass(frozen=True)
class WorkloadParams:
    """The workload of one case: a named scenario (``kvfault.faults.scenarios.SCENARIOS``)
    and the seed that draws its prompts, ids and pictures."""

    scenario: str
    seed: int


def workload_params(
    scenarios: Sequence[str] | None = None, seeds: st.SearchStrategy[int] = SEEDS
) -> st.SearchStrategy[WorkloadParams]:
    """A scenario (default: any registered one) and a seed; shrinks toward the first
    scenario and seed 0."""
    from kvfault.faults.scenarios import SCENARIOS

    pool = _names("workload_params", scenarios, SCENARIOS)
    unknown = [s for s in pool if s not in SCENARIOS]
    if unknown or not pool:
        raise ValueError(f"workload_params: unknown scenario {unknown[:1] or pool!r}")
    return st.builds(WorkloadParams, st.sampled_from(pool), seeds)
