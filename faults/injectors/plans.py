"""Fault plans as data: a named injector, its parameters and its trigger, seeded.

The injectors a plan can name, their parameters and how the fixed stack must end under
each live in the catalog, ``kvfault.faults.injectors.catalog.INJECTORS``.

A ``FaultPlan`` is plain, hashable, JSON-able data; ``plan.injectors()`` builds fresh
injector objects for one run (injectors hold per-run state, plans do not). Plans are
drawable by hypothesis (``kvfault.faults.strategies``) so a failing plan shrinks, and by
``swarm_plan`` (a random subset of injectors drawn from a seed).

Every injector of a plan must demonstrably fire: ``fired_report`` counts firings (the
one count the campaign's judge reads), and a run whose planned fault never fired is
NOT EXERCISED, never a pass.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from kvfault.faults.argtypes import check_scale
from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.runs import Injector
from kvfault.reference.types import Request

# -- specs and plans -----------------------------------------------------------------------


@dataclass(frozen=True)
class FaultSpec:
    """One fault: ``injector`` names an entry of ``INJECTORS``; ``params`` are its
    keyword arguments as sorted (name, value) pairs in canonical form (lists as
    tuples, floats as floats), so a spec is hashable and survives a JSON round trip.
    Bad input raises ``ValueError`` with one clear line."""

    injector: str
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.injector, str) or self.injector not in INJECTORS:
            raise ValueError(
                f"unknown injector {self.injector!r}; known: {', '.join(sorted(INJECTORS))}"
            )
        try:
            params = dict(self.params)
        except (TypeError, ValueError):
            raise ValueError(f"{self.injector}: params must be (name, value) pairs") from None
        object.__setattr__(self, "params", INJECTORS[self.injector].check(params))
        try:  # constraints between parameters (two ports, ...) show at construction
            INJECTORS[self.injector].factory(seed=0, **dict(self.params))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad parameters for {self.injector}: {exc}") from None

    @classmethod
    def of(cls, injector: str, **params: Any) -> FaultSpec:
        return cls(injector, tuple(params.items()))

    def build(self, seed: int = 0) -> Injector:
        """A fresh injector for one run seeded with the run's ``seed``."""
        try:
            inj = INJECTORS[self.injector].factory(seed=seed, **dict(self.params))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad parameters for {self.injector}: {exc}") from None
        inj.spec = self
        return inj

    def as_json(self) -> dict[str, Any]:
        return {"injector": self.injector, "params": _thaw(dict(self.params))}

    def describe(self) -> str:
        args = ", ".join(f"{k}={_thaw(v)}" for k, v in self.params)
        return f"{self.injector}({args})"


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one run, the seed that drives their triggers (the run's seed) and
    the scale the scenario runs at (``kvfault.faults.scenarios.RunContext.scale``)."""

    faults: tuple[FaultSpec, ...] = ()
    seed: int = 0
    scale: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"plan seed must be an integer, got {self.seed!r}")
        check_scale(self.scale)
        object.__setattr__(self, "faults", tuple(self.faults))
        for f in self.faults:
            if not isinstance(f, FaultSpec):
                raise ValueError(f"a plan's faults are FaultSpecs, got {f!r}")

    def injectors(self) -> list[Injector]:
        """Fresh injectors for one run (a factory: ``run_case(injectors=plan.injectors)``)."""
        return [f.build(self.seed) for f in self.faults]

    def request_map(self) -> Callable[[Request], Request] | None:
        """The request map the plan needs (the hash-order shuffle's salted ids), or None:
        pass it as ``run_case(request_map=...)``."""
        return _compose([inj.request_map() for inj in self.injectors()])

    def replay_map(self) -> Callable[[Request], Request] | None:
        """The determinism re-run's request map: pass as ``run_case(replay_map=...)``."""
        return _compose([inj.replay_map() for inj in self.injectors()])

    @property
    def names(self) -> list[str]:
        return [f.injector for f in self.faults]

    def describe(self) -> str:
        at = f", scale {self.scale}" if self.scale != 1 else ""
        faults = ", ".join(f.describe() for f in self.faults) or "no faults"
        return f"seed {self.seed}{at}: {faults}"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": self.seed, "faults": [f.as_json() for f in self.faults]}
        if self.scale != 1:  # plans at the default size read as they always did
            out["scale"] = self.scale
        return out

    def dumps(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> FaultPlan:
        """Parse a plan from JSON text; ``ValueError`` in one line on bad input."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a fault plan must be JSON: {exc}") from None
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj: Any) -> FaultPlan:
        """Parse a plan; raises ``ValueError`` with one clear line on bad input."""
        if not isinstance(obj, dict):
            raise ValueError("a fault plan is a JSON object with 'seed' and 'faults'")
        unknown = sorted(set(obj) - {"seed", "faults", "scale"})
        if unknown:
            raise ValueError(
                f"unknown plan field {unknown[0]!r}; a plan has 'seed', 'faults' and 'scale'"
            )
        seed = obj.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"plan seed must be an integer, got {seed!r}")
        scale = check_scale(obj.get("scale", 1))
        faults = obj.get("faults", [])
        if not isinstance(faults, list):
            raise ValueError("plan 'faults' must be a list")
        specs = []
        for i, f in enumerate(faults):
            if not isinstance(f, dict) or not isinstance(f.get("injector"), str):
                raise ValueError(f"fault #{i} must be an object with an 'injector' name")
            extra = sorted(set(f) - {"injector", "params"})
            if extra:
                raise ValueError(f"fault #{i} ({f['injector']}): unknown field {extra[0]!r}")
            params = f.get("params", {})
            if not isinstance(params, dict):
                raise ValueError(f"fault #{i} ({f['injector']}): 'params' must be an object")
            specs.append(FaultSpec.of(f["injector"], **params))
        return cls(tuple(specs), seed, scale)


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def _compose(
    maps: Sequence[Callable[[Request], Request] | None],
) -> Callable[[Request], Request] | None:
    given = [m for m in maps if m is not None]
    if not given:
        return None
    if len(given) == 1:
        return given[0]

    def composed(req: Request) -> Request:
        for m in given:
            req = m(req)
        return req

    return composed


# -- swarm mode --------------------------------------------------------------------------


def draw_params(name: str, rng: random.Random) -> dict[str, Any]:
    """Parameters for ``name`` drawn from ``rng``: the catalog defaults with each
    trigger redrawn in a small range, so a swarm's faults fire early in a run."""
    info = INJECTORS[name]
    params = dict(info.defaults)
    if "nth" in info.params:
        hi = int(info.params["nth"].draw_hi or 16)
        params["nth"] = tuple(sorted(rng.sample(range(1, hi + 1), rng.randint(1, 2))))
        params.pop("p", None)
        if name == "late_visibility":
            params["p"] = rng.choice((0.0, 0.5, 1.0))
    if name == "slow_forward":
        params["forwards"] = (
            (0, rng.choice((5.0, 29.0))),
            (rng.randint(1, 4), rng.choice((10.0, 21.0))),
        )
    return params


def swarm_plan(
    seed: int,
    pinned: set[str] | Sequence[str] | None = None,
    *,
    share: float = 0.5,
    scenario: str | None = None,
) -> FaultPlan:
    """Swarm mode: a plan enabling a random subset of ``INJECTORS`` drawn from ``seed``
    and ``scenario`` (each injector with probability ``share``, at least one), with
    trigger parameters drawn from them too, so every scenario of a campaign gets its own
    subsets. ``pinned`` fixes the subset: exactly those injectors are enabled
    (parameters still drawn). Same seed, scenario and pins, same plan."""
    if pinned is not None:
        unknown = sorted(set(pinned) - set(INJECTORS))
        if unknown:
            raise ValueError(
                f"unknown injector {unknown[0]!r} pinned; known: {', '.join(sorted(INJECTORS))}"
            )
    rng = random.Random(f"swarm/{seed}" if scenario is None else f"swarm/{scenario}/{seed}")
    names = sorted(INJECTORS)
    # Draw for every name whatever is pinned, so pins never shift the parameter draws.
    coins = {n: rng.random() < share for n in names}
    params = {n: draw_params(n, rng) for n in names}
    if pinned:
        chosen = [n for n in names if n in set(pinned)]
    else:
        chosen = [n for n in names if coins[n]] or [names[rng.randrange(len(names))]]
        homes = home_injectors(scenario) if scenario is not None else []
        if homes:
            # The scenario's own injectors take turns, one per seed, at the catalog's
            # defaults (the fault row shows they fire there): some fire nowhere else
            # (engine_restart, late_completion, port_zero_ids), and a random subset
            # alone leaves them to luck. Faults that end a run early (a stop, a refused
            # start) keep out of its way: they fire in other scenarios' swarms.
            anchor = homes[seed % len(homes)]
            params[anchor] = dict(INJECTORS[anchor].defaults)
            chosen = [n for n in chosen if n == anchor or _runs_on(n)]
            chosen = sorted({*chosen, anchor})
    return FaultPlan(tuple(FaultSpec.of(n, **params[n]) for n in chosen), seed)


def _runs_on(name: str) -> bool:
    """Whether the fixed stack runs to the end under ``name`` on its own scenario."""
    expect = INJECTORS[name].expect
    return expect is not None and expect.error is None


def home_injectors(scenario: str) -> list[str]:
    """The injectors whose catalog entry exercises them on ``scenario``, by name."""
    return sorted(n for n, info in INJECTORS.items() if info.scenario == scenario)


def swarm_seeds_to_cover() -> int:
    """How many consecutive seeds a swarm over every scenario needs so that each
    injector is its home scenario's turn at least once (``swarm_plan``)."""
    homes = [home_injectors(s) for s in {i.scenario for i in INJECTORS.values()}]
    return max(map(len, homes), default=1)


# -- did the faults fire? ----------------------------------------------------------------


def fired_report(injectors: Sequence[Injector]) -> dict[str, int]:
    """How often each injector fired, by name (zero included: a fault that never
    fired must show)."""
    out: dict[str, int] = {}
    for inj in injectors:
        out[inj.name] = out.get(inj.name, 0) + inj.fired
    return out


def planned(injectors: Sequence[Injector]) -> list[Injector]:
    """The injectors a plan built (a scenario's own faults are part of its workload)."""
    return [inj for inj in injectors if inj.spec is not None]


def not_exercised(report: Mapping[str, int]) -> list[str]:
    """The names in a fired report that never fired."""
    return sorted(name for name, count in report.items() if not count)
