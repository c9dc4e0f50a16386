"""The engine step loop (docs/design.md#the-step-loop) on the simulated collaborators: outputs equal the
cold run with and without tier hits, the worker polls only between forwards, idle
ticks, restarts with the tier kept, and how a run ends (finished, stopped, hung)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfault.fakes import DeterministicModel, SimWorld, Workloads
from kvfault.reference import Ev, Geometry, Request, TransferUnprovable
from kvfault.reference.stack import EngineConfig

GEO = Geometry(16, 256, 2048, 1024)


def reqs(n, length, seed=11, tag=""):
    w = Workloads(seed)
    return [Request(w.request_id() + tag, w.prompt(length)) for _ in range(n)]


def run_engine(cfg, requests, world=None, **kw):
    world = world or SimWorld()
    engine = world.engine(cfg, **kw)
    for r in requests:
        engine.add_request(r)
    return world, engine, engine.run()


@pytest.mark.parametrize(
    "kind, grid", [("dense", "block"), ("hybrid", "block"), ("hybrid", "chunk")]
)
def test_cold_run_outputs_equal_the_models_cold_output(kind, grid):
    cfg = EngineConfig(geometry=GEO, model_kind=kind, state_grid=grid)
    rs = reqs(3, 1300) + reqs(1, 7, seed=5)
    world, engine, out = run_engine(cfg, rs)
    assert out.stopped is None and not out.hung
    model = DeterministicModel(kind, GEO)
    assert out.outputs == {r.req_id: model.cold_output(r) for r in rs}
    assert all(len(o) == r.max_output_tokens for r, o in zip(rs, out.outputs.values(), strict=True))


@pytest.mark.parametrize(
    "kind, grid", [("dense", "block"), ("hybrid", "block"), ("hybrid", "chunk")]
)
def test_restart_with_the_tier_kept_loads_and_outputs_stay_cold(kind, grid):
    cfg = EngineConfig(geometry=GEO, model_kind=kind, state_grid=grid)
    world = SimWorld()
    tier = world.memory_tier(cfg)
    first = reqs(4, 1500)
    _, engine, out = run_engine(cfg, first, world, tier=tier)
    assert out.stopped is None
    engine.restart()
    second = [replace(r, req_id=r.req_id + "-again") for r in first]
    for r in second:
        engine.add_request(r)
    out = engine.run()
    assert out.stopped is None and not out.hung
    model = DeterministicModel(kind, GEO)
    for r in second:
        assert out.outputs[r.req_id] == model.cold_output(r)
    claims = {e.req_id: e.data["claim"] for e in world.trace.of(Ev.LOOKUP)}
    assert all(claims[r.req_id] > 0 for r in second)
    finished = [e for e in world.trace.of(Ev.COMPLETION_APPLIED) if e.data.get("outcome")]
    assert len(finished) == len(second)


def test_dense_chunk_aligned_prompt_sent_twice_gives_back_one_chunk():
    cfg = EngineConfig(geometry=GEO, model_kind="dense")
    world = SimWorld()
    tier = world.memory_tier(cfg)
    (r,) = reqs(1, 1024)
    _, engine, _ = run_engine(cfg, [r], world, tier=tier)
    engine.restart()
    again = replace(r, req_id="again")
    engine.add_request(again)
    out = engine.run()
    lookup = [e for e in world.trace.of(Ev.LOOKUP) if e.req_id == "again"][0]
    assert (lookup.data["kv_hit"], lookup.data["claim"]) == (1024, 768)
    assert out.outputs["again"] == DeterministicModel("dense", GEO).cold_output(again)


def test_hbm_prefix_cache_hit_without_the_tier():
    cfg = EngineConfig(geometry=GEO, model_kind="dense")
    (r,) = reqs(1, 1000)
    world, engine, _ = run_engine(cfg, [r])
    engine.add_request(replace(r, req_id="again"))
    out = engine.run()
    lookup = [e for e in world.trace.of(Ev.LOOKUP) if e.req_id == "again"][0]
    assert lookup.data["hbm_hit"] == 992
    assert not [e for e in world.trace.of(Ev.DISPATCH) if e.req_id == "again"]
    assert out.outputs["again"] == out.outputs[r.req_id]


def test_the_worker_polls_only_between_forwards():
    cfg = EngineConfig(geometry=GEO, model_kind="hybrid", state_grid="chunk")
    world = SimWorld()
    tier = world.memory_tier(cfg)
    first = reqs(6, 2000)
    _, engine, _ = run_engine(cfg, first, world, tier=tier)
    engine.restart()
    for r in first:
        engine.add_request(replace(r, req_id=r.req_id + "-2"))
    engine.add_request(reqs(1, 3000, seed=99)[0])  # keeps forwards running meanwhile
    out = engine.run()
    assert out.stopped is None
    polled = {Ev.RETRIEVE_TERMINAL, Ev.COPY_ENQUEUE, Ev.COPY_COMPLETE, Ev.FINISHED_REPORTED}
    in_forward = False
    seen = 0
    for ev in world.trace.events:
        if ev.kind is Ev.FORWARD_START:
            in_forward = True
        elif ev.kind is Ev.FORWARD_END:
            in_forward = False
        elif ev.kind in polled:
            seen += 1
            assert not in_forward, f"{ev.kind.value} of {ev.op} inside a forward"
    assert seen >= 4 * 6


def test_an_idle_engine_jumps_to_the_next_arrival():
    cfg = EngineConfig(geometry=GEO)
    (r,) = reqs(1, 300)
    world, engine, out = run_engine(cfg, [replace(r, arrival_time=100.0)])
    (arrive,) = world.trace.of(Ev.ARRIVE)
    assert arrive.t == pytest.approx(100.0)
    assert out.steps < 20


def test_pending_work_without_a_forward_polls_on_idle_ticks():
    cfg = EngineConfig(geometry=GEO, idle_tick_s=0.5)
    world = SimWorld()
    tier = world.memory_tier(cfg)
    (r,) = reqs(1, 600)
    _, engine, _ = run_engine(cfg, [r], world, tier=tier)
    engine.restart()
    t0 = world.clock.now()
    engine.add_request(replace(r, req_id="again"))
    engine.step()  # dispatches the load; nothing to compute
    assert world.clock.now() == pytest.approx(t0 + 0.5)
    out = engine.run()
    assert out.stopped is None
    # retrieve seen on the first idle tick, copy complete on the second: no forward ran
    assert [e.t for e in world.trace.of(Ev.RETRIEVE_TERMINAL)] == [pytest.approx(t0 + 0.5)]
    assert [e.t for e in world.trace.of(Ev.COPY_COMPLETE)] == [pytest.approx(t0 + 1.0)]
    assert not [e for e in world.trace.of(Ev.FORWARD_START) if t0 <= e.t < t0 + 1.0]


def test_a_lost_tier_reply_stops_the_run_and_the_trace_records_it():
    cfg = EngineConfig(geometry=GEO)
    world = SimWorld()
    tier = world.memory_tier(cfg)
    (r,) = reqs(1, 600)
    _, engine, _ = run_engine(cfg, [r], world, tier=tier)
    engine.restart()
    lost = set()
    submit, poll = tier.submit_retrieve, tier.poll

    def submit_lost(*args):
        ticket = submit(*args)
        lost.add(id(ticket))
        return ticket

    tier.submit_retrieve = submit_lost
    tier.poll = lambda ticket: None if id(ticket) in lost else poll(ticket)
    engine.add_request(replace(r, req_id="again"))
    out = engine.run()
    assert isinstance(out.stopped, TransferUnprovable)
    assert out.stopped.op.req_id == "again"
    (stop,) = world.trace.of(Ev.STOP)
    assert stop.op == out.stopped.op and stop.data["error"] == "TransferUnprovable"
    assert stop.data["message"] == str(out.stopped)
    assert 30.0 < stop.data["elapsed"] <= 30.0 + cfg.idle_tick_s + 1e-9


def test_a_run_past_its_limit_is_hung_not_finished():
    cfg = EngineConfig(geometry=GEO)
    (r,) = reqs(1, 300)
    _, _, out = run_engine(cfg, [replace(r, arrival_time=1e6)])
    assert out.hung and out.stopped is None
    world = SimWorld()
    engine = world.engine(cfg)
    engine.add_request(r)
    out = engine.run(max_steps=1)
    assert out.hung and out.steps == 1


def test_engine_config():
    cfg = EngineConfig()
    assert cfg.bound_s == 40.0 and cfg.transfer_deadline_s == 30.0 and cfg.restore_slots == 2
    with pytest.raises(ValueError):
        EngineConfig(idle_tick_s=0)
    with pytest.raises(ValueError):
        EngineConfig(bound_slack_s=-1)


def test_same_seed_same_trace():
    cfg = EngineConfig(geometry=GEO, model_kind="hybrid")
    digests = set()
    for _ in range(2):
        world, _, _ = run_engine(cfg, reqs(3, 1200))
        digests.add(world.trace.digest())
    assert len(digests) == 1


def test_an_eviction_between_lookup_and_retrieve_fails_the_load_and_recomputes():
    cfg = EngineConfig(geometry=GEO, model_kind="hybrid", state_grid="block")
    world = SimWorld()
    tier = world.memory_tier(cfg)
    (r,) = reqs(1, 1300)
    _, engine, _ = run_engine(cfg, [r], world, tier=tier)
    engine.restart()
    again = replace(r, req_id="again")
    engine.add_request(again)
    tier.latency_s = 1.0  # the retrieve answers (and reads) a second after submission
    engine.step()  # lookup hit and dispatch; the retrieve is submitted
    assert not list(world.trace.of(Ev.RETRIEVE_TERMINAL))
    assert tier.drop_chunk(again.prompt_token_ids, 0)
    out = engine.run()
    assert out.stopped is None and not out.hung
    (terminal,) = world.trace.of(Ev.RETRIEVE_TERMINAL)
    assert terminal.data["ok"] is False and "evicted" in terminal.data["error"]
    applied = [e for e in world.trace.of(Ev.COMPLETION_APPLIED) if e.req_id == "again"]
    assert [e.data["outcome"] for e in applied] == ["failed"]
    assert out.outputs["again"] == DeterministicModel("hybrid", GEO).cold_output(again)


def test_a_finished_run_reports_it_holds_nothing_and_steps_count_from_one():
    cfg = EngineConfig(geometry=GEO, model_kind="dense")
    world, engine, out = run_engine(cfg, reqs(2, 600), name="e0")
    (q,) = world.trace.of(Ev.QUIESCENT)
    assert q.data == {
        "engine": "e0",
        "hbm_blocks": 0,
        "loading": 0,
        "unfinished": 0,
        "loads": 0,
        "saves": 0,
        "tier_tickets": 0,
    }
    starts = list(world.trace.of(Ev.FORWARD_START))
    assert [e.data["index"] for e in starts] == list(range(len(starts)))
    first = next(world.trace.of(Ev.ARRIVE))
    assert first.step == 1 and out.steps == engine.steps
    engine.restart()
    (r,) = world.trace.of(Ev.RESTART)
    assert r.data == {"engine": "e0"}


def test_a_chunk_grid_hybrid_anchors_only_on_the_chunk_grid():
    cfg = EngineConfig(geometry=GEO, model_kind="hybrid", state_grid="chunk")
    world, _, out = run_engine(cfg, reqs(1, 1300))
    assert out.stopped is None
    anchors = [e.data["position"] for e in world.trace.of(Ev.ANCHOR)]
    assert anchors and all(a % GEO.chunk_size == 0 for a in anchors)


def test_the_trace_names_each_forward_and_a_stop_names_its_error():
    import time

    from kvfault.fakes.sim import SimWorld as _World

    cfg = EngineConfig(geometry=GEO, model_kind="dense")
    world = _World()
    engine = world.engine(cfg)
    for r in reqs(2, 600):
        engine.add_request(r)
    t0 = time.perf_counter()
    out = engine.run()
    assert 0 <= out.wall_seconds <= time.perf_counter() - t0
    starts = list(world.trace.of(Ev.FORWARD_START))
    ends = list(world.trace.of(Ev.FORWARD_END))
    assert [e.data["index"] for e in ends] == [e.data["index"] for e in starts]
    assert starts[0].data["tokens"] == 2 * 600  # both prompts fit the first step's budget


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"idle_tick_s": 0}, "idle_tick_s must be positive, got 0"),
        ({"bound_slack_s": -1.0}, "bound_slack_s must be >= 0, got -1.0"),
    ],
)
def test_engine_config_names_the_bad_setting(kw, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(geometry=GEO, **kw)


@pytest.mark.parametrize("max_out", [1, 2, 4])
def test_a_request_decodes_after_its_prefill_and_then_gives_its_blocks_back(max_out):
    """The prefill's forward gives the first output token; each further token is one
    decode step; then the request finishes and frees its HBM blocks."""
    cfg = EngineConfig(geometry=GEO, model_kind="dense")
    (r,) = reqs(1, 600)
    world, engine, out = run_engine(cfg, [replace(r, max_output_tokens=max_out)])
    assert out.stopped is None and not out.hung
    assert len(list(world.trace.of(Ev.FORWARD_START))) == max_out
    (q,) = world.trace.of(Ev.QUIESCENT)
    assert q.data["hbm_blocks"] == 0 and q.data["unfinished"] == 0
