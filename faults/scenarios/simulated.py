"""Named, parameterised workloads from the seed's validation (docs/design.md#scenarios).

A scenario assembles engines on a simulated host, runs its workload and returns a
``RunResult`` (the trace plus what the checkers need). It takes the stack's ``Rules``
(fixed or a planted legacy variant) and extra injectors from a fault plan; it never
asserts anything itself: ``kvfault.faults.properties.checks`` judges the trace.

A run's ``scale`` multiplies the size of the scenarios that have one (restore bursts,
cold prompts, traffic length, prompt counts; ``Scenario.scales`` says what grows); the
properties hold at every scale, and the run's cost grows linearly with it.

The plumbing a story runs on (``_Run``: one world, injectors bound to its trace, request
bookkeeping) is in ``kvfault.faults.scenarios.harness``; what a scenario declares
(``Scenario``) is in ``kvfault.faults.scenarios.scenario``.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from kvfault.fakes.workloads import resend
from kvfault.faults.injectors.completions import LostCompletion
from kvfault.faults.injectors.engine import SlowForward
from kvfault.faults.properties.names import Prop
from kvfault.faults.runs import RunContext, RunResult, finishes, stops
from kvfault.faults.scenarios.harness import _renamed, _Run
from kvfault.faults.scenarios.scenario import _ALL, _ONE_TIER, Scenario
from kvfault.reference.errors import EngineIdentityConflict
from kvfault.reference.rules.identity import lookup_socket_path
from kvfault.reference.stack.engine import Engine, EngineConfig, EngineOutcome
from kvfault.reference.trace import Ev
from kvfault.reference.types import Geometry, Request

# -- the scenarios ------------------------------------------------------------------


def two_servers(ctx: RunContext) -> RunResult:
    """Two servers on one host, each with its own tier and a real ipc lookup socket;
    prompts cross: X stored on S1 and Y on S2, then X sent to S2 and Y to S1, then
    both restarted and each prompt sent to its own server again."""

    def crossing(run: _Run, engines: list[Engine]) -> None:
        x, y = run.workloads.gsm8k_fewshot(2, prefix_tokens=1024).requests
        plan = [(0, x, "a"), (1, y, "a"), (1, x, "b"), (0, y, "b")]
        for idx, req, tag in plan:
            run.submit(engines[idx], _renamed(run, [req], tag))
            run.run(engines[idx])
        for e in engines:
            e.restart()
        for idx, req in ((0, x), (1, y)):
            run.submit(engines[idx], _renamed(run, [req], "c"))
            run.run(engines[idx])

    return _one_host("two_servers", ctx, 1, crossing)


def two_dp_ranks(ctx: RunContext) -> RunResult:
    """Two servers on one host, each with two data-parallel ranks: four engines, each
    with its own tier and a real ipc lookup socket named by its server's port and its
    rank. Each rank stores its own prompt; every engine restarts; each prompt goes back
    to its own rank and loads."""

    def own_prompts(run: _Run, engines: list[Engine]) -> None:
        reqs = run.workloads.gsm8k_fewshot(len(engines), prefix_tokens=1024).requests
        for engine, req in zip(engines, reqs, strict=True):
            run.submit(engine, _renamed(run, [req], "a"))
            run.run(engine)
        for e in engines:
            e.restart()
        for engine, req in zip(engines, reqs, strict=True):
            run.submit(engine, _renamed(run, [req], "b"))
            run.run(engine)

    return _one_host("two_dp_ranks", ctx, 2, own_prompts)


def _one_host(
    name: str, ctx: RunContext, ranks: int, workload: Callable[[_Run, list[Engine]], None]
) -> RunResult:
    """One engine per (server, DP rank) on one host: a server per port of
    ``ctx.ports``, ``ranks`` ranks each, every engine with its own tier and a lookup
    socket named by the rules' engine id. A refused bind ends the run at startup."""
    from kvfault.reference.stack.lookup_channel import (
        LookupServer,
        ZmqLookupClient,
        private_rpc_dir,
        remove_rpc_dir,
    )

    config = EngineConfig(geometry=Geometry(16, 256, 2048, 1024), model_kind="dense")
    run = _Run(name, ctx, config)
    made: list[str] = []  # the directory, once made, whatever interrupts what follows
    servers: list[tuple[str, LookupServer]] = []
    clients: list[ZmqLookupClient] = []
    startup_error = None
    try:
        rpc_dir = private_rpc_dir(made=made)
        tiers, paths, labels = [], [], []
        for index, port in enumerate(ctx.ports):
            for rank in range(ranks):
                label = f"S{index + 1}" if ranks == 1 else f"S{index + 1}r{rank}"
                tier = run.wrap("tier", run.new_tier())
                eid = ctx.rules.identity.engine_id(port, rank)
                path = lookup_socket_path(rpc_dir, eid, 0)
                try:
                    server = LookupServer(path, eid, tier, ctx.rules.identity.refuse_live_path)
                except EngineIdentityConflict as exc:
                    startup_error = str(exc).replace(rpc_dir + os.sep, "")
                    run.world.trace.record(
                        Ev.STOP,
                        error="EngineIdentityConflict",
                        server=label,
                        message=startup_error,
                    )
                    break
                servers.append((label, server))
                tiers.append(tier)
                paths.append(path)
                labels.append(label)
                run.world.trace.record(Ev.BIND, server=label, path=os.path.basename(path))
            if startup_error is not None:
                break
        if startup_error is None:
            # Schedulers connect once every server is up, as after a host start.
            clients = [ZmqLookupClient(p) for p in paths]
            engines = [
                run.engine(label, tier=tier, lookup=client)
                for label, tier, client in zip(labels, tiers, clients, strict=True)
            ]
            workload(run, engines)
    finally:
        try:
            for c in clients:
                c.close()
            for label, s in servers:
                s.close()
                run.world.trace.record(Ev.UNBIND, server=label, path=os.path.basename(s.path))
        finally:  # a signal during a close (zmq's term) must not leave the directory
            for made_dir in made:
                remove_rpc_dir(made_dir)
    return run.result(startup_error)


def two_images(ctx: RunContext) -> RunResult:
    """Two pictures with the same text (identical token ids): A is stored, the engine
    restarts, B must not hit A; then both are sent again and each hits its own."""
    config = EngineConfig(
        geometry=Geometry(16, 256, 2048, 256), model_kind="hybrid", state_grid="block"
    )
    run = _Run("two_images", ctx, config)
    engine = run.engine()
    a, b = run.workloads.multimodal_same_text(2).requests
    for batch in ([a], [b], [a, b]):
        run.submit(engine, _renamed(run, batch, f"p{len(run.outcomes)}"))
        run.run(engine)
        if run.stopped():
            break
        engine.restart()
    return run.result()


def restart_tier_kept(ctx: RunContext) -> RunResult:
    """GSM8K-like few-shot pass 1 stores; the engine restarts with the tier kept; pass 2
    loads. Hybrid model on the multiprocess tier (state images only on the chunk grid)."""
    return two_passes(ctx, "restart_tier_kept", prompts=ctx.sized(24))


def two_passes(ctx: RunContext, name: str, prompts: int) -> RunResult:
    """Pass 1 stores ``prompts`` GSM8K-like prompts, the engine restarts with the tier
    kept, pass 2 sends them again; notes pass 2's hit rate."""
    config = EngineConfig(
        geometry=Geometry(16, 256, 2048, 1024), model_kind="hybrid", state_grid="chunk"
    )
    run = _Run(name, ctx, config)
    engine = run.engine()
    reqs = run.workloads.gsm8k_fewshot(prompts).requests
    run.submit(engine, _renamed(run, reqs, "pass1"))
    run.run(engine)
    if not run.stopped():
        engine.restart()
        pass2 = run.submit(engine, _renamed(run, reqs, "pass2"))
        run.run(engine)
        run.notes["pass2_hit_rate"] = round(run.hit_rate(pass2), 4)
    return run.result()


def chunk_aligned_hybrid(ctx: RunContext) -> RunResult:
    """A 2048-token prompt (128-token blocks, 256-token chunks) sent twice on a hybrid,
    the engine restarted in between: the second send loads 1920 tokens."""
    config = EngineConfig(
        geometry=Geometry(128, 256, 2048, 256), model_kind="hybrid", state_grid="block"
    )
    run = _Run("chunk_aligned_hybrid", ctx, config)
    engine = run.engine()
    (req,) = run.workloads.chunk_aligned(2048).requests
    run.submit(engine, _renamed(run, [req], "first"))
    run.run(engine)
    if not run.stopped():
        engine.restart()
        (second,) = run.submit(engine, _renamed(run, [req], "second"))
        run.run(engine)
        claims = [
            e.data["claim"] for e in run.world.trace.of(Ev.LOOKUP) if e.req_id == second.req_id
        ]
        run.notes["second_send_loaded"] = claims[0] if claims else None
    return run.result()


def _compile_and_load(ctx: RunContext) -> SlowForward:
    """The seed's slow start: a 29 s first forward (kernel compile), a 21 s step."""
    return SlowForward({0: ctx.seconds(29.0), 1: ctx.seconds(21.0)})


_BURST_CONFIG = EngineConfig(
    geometry=Geometry(16, 256, 2048, 512), model_kind="hybrid", state_grid="chunk"
)


def _store_then_restart(run: _Run, engine: Engine, reqs: Sequence[Request]) -> None:
    run.submit(engine, _renamed(run, reqs, "store"))
    run.run(engine)
    engine.restart()


def burst_after_restart(
    ctx: RunContext,
    name: str,
    loads: int,
    cold: int,
    config: EngineConfig = _BURST_CONFIG,
    slow: SlowForward | None = None,
) -> RunResult:
    """``loads`` prompts are stored, the server restarts, and they come back at once
    with ``cold`` new long prompts that keep the forwards busy, behind ``slow`` (by
    default the seed's slow start: 29 s compile, 21 s step)."""
    run = _Run(name, ctx, config, [slow or _compile_and_load(ctx)])
    engine = run.engine()
    reqs = run.workloads.burst(loads, 1024).requests
    _store_then_restart(run, engine, reqs)
    fresh = run.workloads.burst(cold, 4096).requests
    run.submit(engine, _renamed(run, reqs, "burst") + _renamed(run, fresh, "cold"))
    run.run(engine)
    return run.result()


def loaded_restart_burst(ctx: RunContext) -> RunResult:
    """``restart_burst`` on a host that stays loaded: after the 29 s first forward every
    forward takes 21 s, so the loads finish two per step and each load still waiting
    needs its bound restarted by the loads finishing ahead of it at least every other
    step (two steps without one are 42 s > 40 s). Healthy: the engine must not stop.
    Its size is fixed (``--scale`` leaves it alone): a pass is 37 forwards of 21 s, and
    five times the loads would outlast an engine run's one-hour limit."""
    slow = SlowForward({0: ctx.seconds(29.0)}, p=1.0, seconds=ctx.seconds(21.0))
    return burst_after_restart(ctx, "loaded_restart_burst", loads=64, cold=2, slow=slow)


def restart_burst(ctx: RunContext) -> RunResult:
    """A restarted server gets 64 restoring requests at once (plus two cold ones that
    keep the forwards busy), behind a 29 s first forward (kernel compile) and a 21 s
    step under host load. Healthy: the engine must not stop."""
    return burst_after_restart(ctx, "restart_burst", loads=ctx.sized(64), cold=ctx.sized(2))


def lost_completion_burst(ctx: RunContext) -> RunResult:
    """A restart burst of 64 restores while further restoring requests keep arriving
    every 2 s for 150 s; the completion of the 32nd load is lost. The engine must stop
    with an error naming that load, one bound after the loads ahead of it finished."""
    return lost_completion_in_traffic(
        ctx, "lost_completion_burst", ctx.sized(64), ctx.sized(75), lost=ctx.sized(32)
    )


def lost_completion_in_traffic(
    ctx: RunContext, name: str, burst: int, stream: int, lost: int
) -> RunResult:
    """``burst`` prompts are stored and come back at once after a restart, while
    ``stream`` more arrive every 2 s; the ``lost``-th load's completion never arrives."""
    run = _Run(name, ctx, _BURST_CONFIG, [LostCompletion([lost])])
    engine = run.engine()
    first = run.workloads.burst(burst, 1024).requests
    later = run.workloads.burst(stream, 1024).requests
    _store_then_restart(run, engine, first + later)
    t0 = run.world.clock.now()
    arrivals = _renamed(run, first, "burst", t0) + [
        resend(r, f"{r.req_id}-stream", t0 + ctx.seconds(2.0) * (i + 1))
        for i, r in enumerate(later)
    ]
    run.submit(engine, arrivals)
    # Room for the whole stream (2 s apart) and the bound after it.
    run.run(engine, max_sim_seconds=ctx.seconds(max(600.0, 4.0 * stream)))
    return run.result()


SIMULATED: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "two_servers",
            "two servers on one host cross prompts over real ipc lookup sockets",
            two_servers,
            (*_ALL, Prop.IDENTITY),
            expect=finishes(),
        ),
        Scenario(
            "two_images",
            "two pictures with the same text: B must not hit A",
            two_images,
            (*_ONE_TIER, Prop.HYBRID),
            expect=finishes(),
        ),
        Scenario(
            "restart_tier_kept",
            "GSM8K-like pass 1 stores, restart with the tier kept, pass 2 loads (hybrid, MP grid)",
            restart_tier_kept,
            (*_ONE_TIER, Prop.GRID, Prop.HYBRID),
            "24*K prompts per pass",
            expect=finishes(),
        ),
        Scenario(
            "chunk_aligned_hybrid",
            "a chunk-aligned 2048-token hybrid prompt sent twice loads 1920 tokens",
            chunk_aligned_hybrid,
            (*_ONE_TIER, Prop.HYBRID),
            expect=finishes(),
        ),
        Scenario(
            "restart_burst",
            "64 restores after a restart behind a 29 s first forward and a 21 s step",
            restart_burst,
            (*_ONE_TIER, Prop.GRID),
            "64*K restores, 2*K cold prompts",
            expect=finishes(),
        ),
        Scenario(
            "loaded_restart_burst",
            "64 restores after a restart behind a 29 s first forward and 21 s steps throughout",
            loaded_restart_burst,
            (*_ONE_TIER, Prop.GRID),
            expect=finishes(),
        ),
        Scenario(
            "lost_completion_burst",
            "a lost load completion in the middle of a burst while traffic flows",
            lost_completion_burst,
            (*_ONE_TIER, Prop.GRID),
            "64*K burst restores, 75*K arrivals 2 s apart, the (32*K)-th load lost",
            expect=stops("LoadNotTerminal", "load", within_s=61.0),
        ),
    )
}


# -- scenarios where a fault plan's injectors fire (their injectors live in faults/injectors/) ----


def small_restart_burst(ctx: RunContext) -> RunResult:
    """A restarted server gets 4 restoring requests at once (plus a cold one that keeps
    the forwards busy) behind a 29 s first forward and a 21 s step: so few loads share
    a step that the order a bound rule numbers them in decides whether the engine
    stops (the hash-order shuffle's scenario). Healthy: it must not stop."""
    return burst_after_restart(ctx, "small_restart_burst", loads=ctx.sized(4), cold=ctx.sized(1))


def two_servers_configured(ctx: RunContext) -> RunResult:
    """``two_servers`` after the plan's configuration faults rewrite the servers'
    startup settings (port-0 ids: data_parallel_base_port left unresolved)."""
    from kvfault.faults.injectors.base import configure_all

    return two_servers(configure_all(ctx.injectors, ctx))


_CRASH_LIMIT = 16  # restarts of one pass before the run counts as hung


def _run_through_crashes(run: _Run, engine: Engine, sent: Sequence[Request]) -> int:
    """Run ``engine``; when it dies (``EngineCrash``) restart it with the tier kept and
    send the requests it had not answered again, under the same ids, as clients retry.
    Returns the number of restarts."""
    from kvfault.faults.injectors.engine import EngineCrash

    restarts = 0
    while True:
        try:
            run.run(engine)
            return restarts
        except EngineCrash:
            restarts += 1
            if restarts > _CRASH_LIMIT:
                run.outcomes.append(EngineOutcome(None, 0.0, 0, dict(engine.outputs), hung=True))
                return restarts
            engine.restart()
            for r in sent:
                if r.req_id not in engine.outputs:
                    engine.add_request(r)


def restart_mid_run(ctx: RunContext) -> RunResult:
    """GSM8K-like pass 1 stores, a planned restart, pass 2 loads (hybrid, MP grid); an
    ``engine_restart`` fault kills the engine at a forward in either pass: it restarts
    with the tier kept (HBM, scheduler and worker state gone) and the unanswered
    requests are sent again. Every answer must still equal its cold run."""
    from kvfault.faults.injectors.engine import arm_crashes

    config = EngineConfig(
        geometry=Geometry(16, 256, 2048, 1024), model_kind="hybrid", state_grid="chunk"
    )
    run = _Run("restart_mid_run", ctx, config)
    arm_crashes(run.injectors)
    engine = run.engine()
    reqs = run.workloads.gsm8k_fewshot(ctx.sized(16)).requests
    crashes = 0
    for tag in ("pass1", "pass2"):
        sent = run.submit(engine, _renamed(run, reqs, tag))
        crashes += _run_through_crashes(run, engine, sent)
        if run.stopped():
            break
        if tag == "pass1":
            engine.restart()
    run.notes["crashes"] = crashes
    return run.result()


SIMULATED.update(
    {
        s.name: s
        for s in (
            Scenario(
                "small_restart_burst",
                "4 restores after a restart behind slow forwards: bound numbering order decides a stop",
                small_restart_burst,
                (*_ONE_TIER, Prop.GRID),
                "4*K restores, K cold prompts",
                expect=finishes(),
            ),
            Scenario(
                "two_servers_configured",
                "two_servers after configuration faults (port-0 ids) rewrite startup settings",
                two_servers_configured,
                (*_ALL, Prop.IDENTITY),
                expect=finishes(),
            ),
            Scenario(
                "restart_mid_run",
                "pass 1 stores, pass 2 loads; the engine may die mid-run and restart with the tier kept",
                restart_mid_run,
                (*_ONE_TIER, Prop.GRID, Prop.HYBRID),
                "16*K prompts per pass",
                expect=finishes(),
            ),
        )
    }
)


# -- HBM pressure, DP ranks, completions after a restart ---------------------------------


def hbm_pressure(ctx: RunContext) -> RunResult:
    """Dense model with prefix caching and an HBM pool of 300 blocks (about two
    prompts): GSM8K-like prompts sharing a few-shot prefix, and two chunk-aligned
    prompts, all arrive at once and then all again. Admission waits for blocks, freed
    blocks are recycled and the prefixes cached in them evicted, so the second round
    finds part of its prefix in HBM and loads the rest from the tier; every output
    must equal its cold run. Notes how many lookups found an HBM hit."""
    config = EngineConfig(
        geometry=Geometry(16, 256, 2048, 1024), model_kind="dense", num_blocks=300
    )
    run = _Run("hbm_pressure", ctx, config)
    engine = run.engine()
    reqs = [
        *run.workloads.gsm8k_fewshot(ctx.sized(10)).requests,
        *run.workloads.chunk_aligned(2048).requests,
        *run.workloads.chunk_aligned(1024).requests,
    ]
    for tag in ("first", "again"):
        run.submit(engine, _renamed(run, reqs, tag))
        run.run(engine)
        if run.stopped():
            break
    lookups = list(run.world.trace.of(Ev.LOOKUP))
    run.notes["hbm_hits"] = sum(1 for e in lookups if e.data["hbm_hit"])
    run.notes["tier_hits"] = sum(1 for e in lookups if e.data["claim"] > e.data["hbm_hit"])
    return run.result()


def late_completion_after_restart(ctx: RunContext) -> RunResult:
    """Prompts are stored, the engine restarts with the tier kept and they all come back;
    while their loads finish, the engine dies (at the 2nd forward after the restart) and
    restarts, and the unanswered requests are sent again under the same ids, so the new
    scheduler dispatches loads for the same requests at once. A completion reported
    before the crash may still arrive after it (the ``late_completion`` fault): the new
    scheduler must never take it for one of its own loads."""
    from kvfault.faults.injectors.engine import EngineRestart

    crash = EngineRestart([2], limit=1)
    config = EngineConfig(geometry=Geometry(16, 256, 2048, 1024), model_kind="dense")
    run = _Run("late_completion_after_restart", ctx, config, [crash])
    engine = run.engine()
    reqs = run.workloads.burst(ctx.sized(8), 1024).requests
    _store_then_restart(run, engine, reqs)
    crash.armed = True  # the crash counts forwards from the restart on
    sent = run.submit(engine, _renamed(run, reqs, "back"))
    run.notes["crashes"] = _run_through_crashes(run, engine, sent)
    return run.result()


SIMULATED.update(
    {
        s.name: s
        for s in (
            Scenario(
                "hbm_pressure",
                "a 300-block HBM pool: blocks recycled, cached prefixes evicted, outputs still cold-equal",
                hbm_pressure,
                _ONE_TIER,
                "10*K GSM8K-like prompts (plus 2 chunk-aligned), sent twice",
                expect=finishes(),
            ),
            Scenario(
                "two_dp_ranks",
                "two servers with two DP ranks each on one host: four lookup sockets, one per (port, rank)",
                two_dp_ranks,
                (*_ALL, Prop.IDENTITY),
                expect=finishes(),
            ),
            Scenario(
                "late_completion_after_restart",
                "restores after a restart; the engine dies mid-burst and the requests come back under the same ids",
                late_completion_after_restart,
                _ONE_TIER,
                "8*K restores",
                expect=finishes(),
            ),
        )
    }
)
