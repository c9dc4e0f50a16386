"""Fault plans as data: a named injector, its parameters and its trigger, seeded.

A ``FaultPlan`` is plain, hashable, JSON-able data; ``plan.injectors()`` builds fresh
injector objects for one run (injectors hold per-run state, plans do not). Plans are
drawable by hypothesis (``faults.strategies``) so a failing plan shrinks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from faults.injectors import Injector, LostCompletion, SlowForward


@dataclass(frozen=True)
class FaultSpec:
    """One fault: ``injector`` names an entry of ``INJECTORS``; ``params`` are its
    keyword arguments as sorted (name, value) pairs, so a spec is hashable."""

    injector: str
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.injector not in INJECTORS:
            raise ValueError(
                f"unknown injector {self.injector!r}; known: {', '.join(sorted(INJECTORS))}"
            )

    @classmethod
    def of(cls, injector: str, **params: Any) -> FaultSpec:
        return cls(injector, tuple(sorted(params.items())))

    def build(self) -> Injector:
        try:
            return INJECTORS[self.injector].factory(**dict(self.params))
        except TypeError as exc:
            raise ValueError(f"bad parameters for {self.injector}: {exc}") from None

    def as_json(self) -> dict[str, Any]:
        return {"injector": self.injector, "params": dict(self.params)}


@dataclass(frozen=True)
class FaultPlan:
    faults: tuple[FaultSpec, ...] = ()
    seed: int = 0

    def injectors(self) -> list[Injector]:
        return [f.build() for f in self.faults]

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "faults": [f.as_json() for f in self.faults]}

    def dumps(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True)

    @classmethod
    def from_json(cls, obj: Any) -> FaultPlan:
        """Parse a plan; raises ``ValueError`` with one clear line on bad input."""
        if not isinstance(obj, dict):
            raise ValueError("a fault plan is a JSON object with 'seed' and 'faults'")
        seed = obj.get("seed", 0)
        if not isinstance(seed, int):
            raise ValueError(f"plan seed must be an integer, got {seed!r}")
        faults = obj.get("faults", [])
        if not isinstance(faults, list):
            raise ValueError("plan 'faults' must be a list")
        specs = []
        for i, f in enumerate(faults):
            if not isinstance(f, dict) or not isinstance(f.get("injector"), str):
                raise ValueError(f"fault #{i} must be an object with an 'injector' name")
            params = f.get("params", {})
            if not isinstance(params, dict):
                raise ValueError(f"fault #{i} ({f['injector']}): 'params' must be an object")
            specs.append(FaultSpec.of(f["injector"], **{k: _freeze(v) for k, v in params.items()}))
        return cls(tuple(specs), seed)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


@dataclass(frozen=True)
class InjectorInfo:
    """Catalog entry: how to build an injector, what it models, and where the
    campaign exercises it (a scenario where it fires, default parameters)."""

    name: str
    factory: Callable[..., Injector]
    description: str
    scenario: str
    defaults: dict[str, Any] = field(default_factory=dict)


INJECTORS: dict[str, InjectorInfo] = {
    i.name: i
    for i in (
        InjectorInfo(
            "slow_forward",
            lambda forwards=((0, 29.0),): SlowForward(dict(forwards)),
            "chosen forwards take long (first forward compiling ~30 s; 21 s steps under load)",
            "restart_burst",
            {"forwards": ((0, 29.0), (1, 21.0))},
        ),
        InjectorInfo(
            "lost_completion",
            lambda nth=(1,): LostCompletion(tuple(nth)),
            "a load's completion (worker -> scheduler) never arrives",
            "lost_completion_burst",
            {"nth": (5,)},
        ),
    )
}
