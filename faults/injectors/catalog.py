"""The injector catalog: every injector a fault plan can name (``INJECTORS``), what it
models, the scenario where the campaign exercises it, its default parameters, the schema
each parameter is checked against and drawn from (``Param``), and how the fixed stack
must end under it (``InjectorInfo.expect``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

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
