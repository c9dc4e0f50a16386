"""Fault plans as data: a named injector, its parameters and its trigger, seeded.

A ``FaultPlan`` is plain, hashable, JSON-able data; ``plan.injectors()`` builds fresh
injector objects for one run (injectors hold per-run state, plans do not). Plans are
drawable by hypothesis (``faults.strategies``) so a failing plan shrinks, and by
``swarm_plan`` (a random subset of injectors drawn from a seed).

Every injector of a plan must demonstrably fire: ``fired_report`` counts firings (the
one count the campaign's judge reads), and a run whose planned fault never fired is
NOT EXERCISED, never a pass.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from faults.argtypes import check_scale
from faults.injectors.base import Injector
from faults.injectors.completions import (
    DuplicateCompletion,
    LateCompletion,
    LostCompletion,
    LostSaveCompletion,
)
from faults.injectors.engine import EngineRestart, SlowForward
from faults.injectors.ids import HashOrderShuffle, PortZeroIds
from faults.injectors.restore_copy import FenceFailure
from faults.injectors.tier import EvictAfterLookup, LateVisibility, LostTierReply, RetrieveFailure
from faults.runs import Expect, finishes, refuses, stops
from reference.types import Request

# -- parameter schema ------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One injector parameter: its kind, what it means, and the range a random draw
    (hypothesis, swarm) takes it from.

    Kinds: ``int``, ``float``, ``bool``, ``ints`` (a list of ints), ``pairs`` (a list
    of ``[int, float]``), ``salt`` (an int or null). ``lo``/``hi`` bound every number.
    """

    kind: str
    doc: str
    lo: float = 0
    hi: float = 2**63 - 1
    max_len: int = 4  # longest list a draw makes
    # A search draws from a narrower range than a spec accepts, so it hits the
    # operations a run actually has (a few dozen loads, stores and forwards).
    draw_hi: float | None = None
    choices: tuple[Any, ...] = ()  # when set, a draw picks from these

    def check(self, injector: str, name: str, value: Any) -> Any:
        """The value in canonical form (tuples, floats), or ``ValueError`` in one line."""

        def bad(want: str) -> ValueError:
            return ValueError(f"{injector}: parameter {name!r} must be {want}, got {value!r}")

        def number(v: Any, kind: str) -> Any:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise bad(self._want())
            if kind == "int" and not isinstance(v, int):
                raise bad(self._want())
            if not self.lo <= v <= self.hi:
                raise bad(self._want())
            return float(v) if kind == "float" else v

        kind = self.kind
        if kind in ("int", "float"):
            return number(value, kind)
        if kind == "bool":
            if not isinstance(value, bool):
                raise bad("true or false")
            return value
        if kind == "salt":
            return None if value is None else number(value, "int")
        if not isinstance(value, (list, tuple)):
            raise bad(self._want())
        if kind == "ints":
            return tuple(number(v, "int") for v in value)
        if kind == "pairs":
            out = []
            for pair in value:
                if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                    raise bad(self._want())
                idx, secs = pair
                if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
                    raise bad(self._want())
                out.append((idx, number(secs, "float")))
            return tuple(out)
        raise AssertionError(f"unknown parameter kind {kind!r}")

    def _want(self) -> str:
        rng = f" in [{self.lo:g}, {self.hi:g}]"
        return {
            "int": f"an integer{rng}",
            "float": f"a number{rng}",
            "salt": "an integer or null",
            "ints": f"a list of integers{rng}",
            "pairs": f"a list of [forward index >= 0, seconds{rng}] pairs",
        }.get(self.kind, self.kind)


def _nth(what: str, hi: int = 1_000_000, draw_hi: int = 16) -> Param:
    return Param(
        "ints", f"1-based counts of the {what} it hits, over the whole run", 1, hi, draw_hi=draw_hi
    )


_P = Param(
    "float",
    "probability per operation, drawn from the run's seed",
    0.0,
    1.0,
    choices=(0.0, 0.05, 0.25, 1.0),
)


# -- the catalog -------------------------------------------------------------------------

# Bounds of an expected stop, on the error's own clock: the load bound (40 s) or the
# transfer deadline (30 s), plus one slow step (21 s), since both are checked between
# forwards.
_BOUND_AND_STEP = 61.0
_DEADLINE_AND_STEP = 51.0


@dataclass(frozen=True)
class InjectorInfo:
    """Catalog entry: how to build an injector, what it models, where the campaign
    exercises it (a scenario where it fires, default parameters) and how the fixed
    stack must end there (``expect``: run to the end, stop with a named error on a
    named operation within a bound, or refuse to start with a named error)."""

    name: str
    factory: Callable[..., Injector]
    description: str
    scenario: str
    defaults: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Param] = field(default_factory=dict)
    expect: Expect | None = None

    @property
    def expect_stop(self) -> str | None:
        """The named error the fixed stack stops (or refuses to start) with, or None."""
        return self.expect.error if self.expect is not None else None

    def check(self, params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """Validated, canonical, sorted parameters; ``ValueError`` in one line."""
        if not isinstance(params, Mapping):
            raise ValueError(f"{self.name}: parameters must be an object")
        out = []
        for key, value in params.items():
            if key not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise ValueError(f"{self.name}: unknown parameter {key!r}; known: {known}")
            out.append((key, self.params[key].check(self.name, key, value)))
        return tuple(sorted(out))


def _build(cls: Callable[..., Injector], **fixed: Any) -> Callable[..., Injector]:
    def factory(seed: int = 0, **params: Any) -> Injector:
        return cls(**fixed, **params, seed=seed)

    return factory


def _slow_forward(
    seed: int = 0,
    forwards: Sequence[tuple[int, float]] = ((0, 29.0),),
    p: float = 0.0,
    seconds: float = 21.0,
) -> SlowForward:
    return SlowForward(dict(forwards), p=p, seconds=seconds, seed=seed)


INJECTORS: dict[str, InjectorInfo] = {
    i.name: i
    for i in (
        InjectorInfo(
            "slow_forward",
            _slow_forward,
            "chosen forwards take long (first forward compiling ~30 s; 21 s steps under load)",
            "restart_burst",
            {"forwards": ((0, 29.0), (1, 21.0))},
            {
                "forwards": Param(
                    "pairs",
                    "[forward index, seconds]: that forward of every engine start takes that long",
                    0,
                    120,
                ),
                "p": _P,
                "seconds": Param("float", "how long a forward hit by p takes", 0, 120),
            },
            expect=finishes(),
        ),
        InjectorInfo(
            "lost_completion",
            _build(LostCompletion),
            "a load's completion (worker -> scheduler) never arrives",
            "lost_completion_burst",
            {"nth": (5,)},
            {"nth": _nth("finished load reports"), "p": _P},
            expect=stops("LoadNotTerminal", "load", within_s=_BOUND_AND_STEP),
        ),
        InjectorInfo(
            "lost_tier_reply",
            _build(LostTierReply),
            "a retrieve's reply (tier -> worker) never arrives",
            "restart_tier_kept",
            {"nth": (3,)},
            {"nth": _nth("retrieves"), "p": _P},
            expect=stops("TransferUnprovable", "load", within_s=_DEADLINE_AND_STEP),
        ),
        InjectorInfo(
            "hash_order_shuffle",
            _build(HashOrderShuffle),
            "request-id hashes salted from the run's seed: set order over ids changes",
            "small_restart_burst",
            {},
            {
                "salt": Param("salt", "the salt (null: drawn from the run's seed)", 0, 2**64 - 1),
                "replay_salt": Param(
                    "salt", "the determinism re-run's salt (null: another one)", 0, 2**64 - 1
                ),
            },
            expect=finishes(),
        ),
        InjectorInfo(
            "port_zero_ids",
            _build(PortZeroIds),
            "data_parallel_base_port unresolved (0) on two servers sharing a host",
            "two_servers_configured",
            {"ports": (0, 0)},
            {
                "ports": Param(
                    "ints",
                    "the two servers' data_parallel_base_port",
                    0,
                    65535,
                    2,
                    choices=((0, 0), (0, 34969), (35849, 0), (35849, 35849)),
                )
            },
            expect=refuses("EngineIdentityConflict"),
        ),
        InjectorInfo(
            "evict_after_lookup",
            _build(EvictAfterLookup),
            "the tier drops a chunk between a lookup hit and its retrieve",
            "restart_tier_kept",
            {"nth": (2,)},
            {
                "nth": _nth("retrieves"),
                "p": _P,
                "chunk": Param(
                    "int", "which chunk of the retrieved range (negative: from its end)", -8, 8
                ),
            },
            expect=finishes(),
        ),
        InjectorInfo(
            "retrieve_failure",
            _build(RetrieveFailure),
            "a retrieve fails (the tier answers ok=False)",
            "restart_tier_kept",
            {"nth": (2,)},
            {"nth": _nth("retrieves"), "p": _P},
            expect=finishes(),
        ),
        InjectorInfo(
            "fence_failure",
            _build(FenceFailure),
            "the restore fence raises once at enqueue (transient): retried at a later poll",
            "restart_tier_kept",
            {"nth": (2,)},
            {"nth": _nth("loads whose copy is enqueued"), "p": _P},
            expect=finishes(),
        ),
        InjectorInfo(
            "fence_failure_persistent",
            _build(FenceFailure, persistent=True, name="fence_failure_persistent"),
            "the restore fence raises at every enqueue of a load: the transfer deadline stops the engine",
            "restart_tier_kept",
            {"nth": (2,)},
            {"nth": _nth("loads whose copy is enqueued"), "p": _P},
            expect=stops("TransferUnprovable", "load", within_s=_DEADLINE_AND_STEP),
        ),
        InjectorInfo(
            "engine_restart",
            _build(EngineRestart),
            "the engine dies mid-run and restarts (HBM and trackers gone) while the tier keeps its data",
            "restart_mid_run",
            {"nth": (8, 19)},
            {
                "nth": _nth("forwards", draw_hi=30),
                "p": _P,
                "limit": Param("int", "at most this many crashes per run", 1, 8),
            },
            expect=finishes(),
        ),
        InjectorInfo(
            "late_visibility",
            _build(LateVisibility),
            "a store is acknowledged before it is visible to lookups",
            "restart_tier_kept",
            {"p": 1.0},
            {
                "nth": _nth("stores"),
                "p": _P,
                "delay_s": Param(
                    "float", "seconds between the acknowledgement and visibility", 1e-3, 600
                ),
            },
            expect=finishes(),
        ),
        InjectorInfo(
            "duplicate_completion",
            _build(DuplicateCompletion),
            "a load's completion (worker -> scheduler) arrives twice",
            "restart_tier_kept",
            {"nth": (2,)},
            {"nth": _nth("finished load reports"), "p": _P},
            expect=finishes(),
        ),
        InjectorInfo(
            "late_completion",
            _build(LateCompletion),
            "a load's completion arrives only after the engine restarted, next to the new scheduler's loads",
            "late_completion_after_restart",
            {"nth": (1,)},
            {"nth": _nth("finished load reports"), "p": _P},
            expect=finishes(),
        ),
        InjectorInfo(
            "lost_save_completion",
            _build(LostSaveCompletion),
            "a save's completion (worker -> scheduler) never arrives",
            "restart_tier_kept",
            {"nth": (3,)},
            {"nth": _nth("save reports"), "p": _P},
            expect=finishes(),
        ),
    )
}


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
    the scale the scenario runs at (``faults.scenarios.RunContext.scale``)."""

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
