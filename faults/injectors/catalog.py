"""The injector catalog: every injector a fault plan can name (``INJECTORS``), what it
models, the scenario where the campaign exercises it, its default parameters, the schema
each parameter is checked against and drawn from (``Param``), and how the fixed stack
must end under it (``InjectorInfo.expect``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kvfault.faults.injectors.completions import (
    DuplicateCompletion,
    LateCompletion,
    LostCompletion,
    LostSaveCompletion,
)
from kvfault.faults.injectors.engine import EngineRestart, SlowForward
from kvfault.faults.injectors.ids import HashOrderShuffle, PortZeroIds
from kvfault.faults.injectors.params import FLOAT, INT, INTS, PAIRS, SALT, Param
from kvfault.faults.injectors.restore_copy import FenceFailure
from kvfault.faults.injectors.tier import (
    EvictAfterLookup,
    LateVisibility,
    LostTierReply,
    RetrieveFailure,
)
from kvfault.faults.runs import Expect, Injector, finishes, refuses, stops

# -- parameter schema ------------------------------------------------------------------


def _nth(what: str, hi: int = 1_000_000, draw_hi: int = 16) -> Param:
    return Param(
        INTS, f"1-based counts of the {what} it hits, over the whole run", 1, hi, draw_hi=draw_hi
    )


_P = Param(
    FLOAT,
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
                    PAIRS,
                    "[forward index, seconds]: that forward of every engine start takes that long",
                    0,
                    120,
                ),
                "p": _P,
                "seconds": Param(FLOAT, "how long a forward hit by p takes", 0, 120),
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
                "salt": Param(SALT, "the salt (null: drawn from the run's seed)", 0, 2**64 - 1),
                "replay_salt": Param(
                    SALT, "the determinism re-run's salt (null: another one)", 0, 2**64 - 1
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
                    INTS,
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
                    INT, "which chunk of the retrieved range (negative: from its end)", -8, 8
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
                "limit": Param(INT, "at most this many crashes per run", 1, 8),
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
                    FLOAT, "seconds between the acknowledgement and visibility", 1e-3, 600
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
