"""The real-tier sizes of three scenarios: the same stories as ``restart_tier_kept``,
``restart_burst`` and ``lost_completion_burst``, small enough for a real lmcache server
in real time on two cores. A real tier's catalog lists them (the in-process tier runs
the full-size stories instead)."""

from __future__ import annotations

from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import RunContext, RunResult, finishes, stops
from kvfault.faults.scenarios.harness import _renamed, _Run
from kvfault.faults.scenarios.scenario import Scenario
from kvfault.faults.scenarios.simulated import (
    _BURST_CONFIG,
    _compile_and_load,
    _store_then_restart,
    lost_completion_in_traffic,
    two_passes,
)


def real_restart_tier_kept(ctx: RunContext) -> RunResult:
    """``restart_tier_kept`` with 8 prompts instead of 24: pass 1 stores, the engine
    restarts with the tier kept, pass 2 loads (hybrid, MP grid). The wire faults' run:
    small enough for real time, with loads enough to hit the 3rd of them."""
    return two_passes(ctx, "real_restart_tier_kept", prompts=8)


def real_restart_burst(ctx: RunContext) -> RunResult:
    """``restart_burst`` with 16 restores instead of 64 (plus two cold requests that
    keep the forwards busy) behind the 29 s compile and the 21 s step: enough loads
    that bounds counted from dispatch, or a copy deadline counted from submission,
    run out; few enough for a real server on two cores. Only the restarted engine
    compiles slowly (the storing pass is not the story and would double the wall
    time). Healthy: no stop."""
    from kvfault.faults.injectors.engine import SlowForward

    slow = SlowForward({})
    run = _Run("real_restart_burst", ctx, _BURST_CONFIG, [slow])
    engine = run.engine()
    reqs = run.workloads.burst(16, 1024).requests
    _store_then_restart(run, engine, reqs)
    slow.durations.update(_compile_and_load(ctx).durations)
    cold = run.workloads.burst(2, 4096).requests
    run.submit(engine, _renamed(run, reqs, "burst") + _renamed(run, cold, "cold"))
    run.run(engine)
    return run.result()


def real_lost_completion_burst(ctx: RunContext) -> RunResult:
    """``lost_completion_burst`` at real-tier size: a burst of 16 restores while 20
    more restoring requests arrive every 2 s (40 s of traffic); the completion of the
    8th load is lost. The engine must stop naming that load one bound after the loads
    ahead of it finished, while traffic still flows."""
    return lost_completion_in_traffic(ctx, "real_lost_completion_burst", 16, 20, lost=8)


_PROPS = (Prop.CORRECTNESS, Prop.KEYS, Prop.NO_FALSE_STOP, Prop.LIVENESS, Prop.DETERMINISM)
REAL_SIZED: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "real_restart_tier_kept",
            "restart_tier_kept with 8 prompts: pass 1 stores, restart, pass 2 loads (real-tier size)",
            real_restart_tier_kept,
            (*_PROPS, Prop.GRID, Prop.HYBRID),
            expect=finishes(),
        ),
        Scenario(
            "real_restart_burst",
            "16 restores after a restart behind a 29 s first forward and a 21 s step (real-tier size)",
            real_restart_burst,
            (*_PROPS, Prop.GRID),
            expect=finishes(),
        ),
        Scenario(
            "real_lost_completion_burst",
            "a lost load completion in a burst of 16 while 20 more requests arrive (real-tier size)",
            real_lost_completion_burst,
            (*_PROPS, Prop.GRID),
            expect=stops("LoadNotTerminal", "load", within_s=61.0),
        ),
    )
}
