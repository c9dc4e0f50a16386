"""Every scenario (docs/design.md#scenarios) on the fixed stack passes its properties, with the seed's numbers
checked on the trace (virtual time only).

Each rule is tested at its own function in its own module; here it is tested where the
seed found it: keys in two_images, identity in two_servers, anchors in
restart_tier_kept, hybrid hits in chunk_aligned_hybrid, deadline and bounds in
restart_burst, liveness in lost_completion_burst.
"""

from __future__ import annotations

import os

import pytest

from kvfault.faults import SCENARIOS, RunContext
from kvfault.faults.campaign import JudgedRun, run_case
from kvfault.reference import Ev

SEED_SCENARIOS = (
    "two_servers",
    "two_images",
    "restart_tier_kept",
    "chunk_aligned_hybrid",
    "restart_burst",
    "lost_completion_burst",
)
_CACHE: dict[str, JudgedRun] = {}


def case(name: str) -> JudgedRun:
    """One run (plus its determinism re-run) per scenario, shared by this module."""
    if name not in _CACHE:
        _CACHE[name] = run_case(name, seed=0)
    return _CACHE[name]


def since_last_restart(run):
    idx = max((i for i, e in enumerate(run.trace.events) if e.kind is Ev.RESTART), default=0)
    return run.trace.events[idx:]


def lookups(run):
    return {e.req_id: e.data for e in run.trace.of(Ev.LOOKUP)}


@pytest.mark.parametrize("name", SEED_SCENARIOS)
def test_scenario_passes_its_properties(name):
    res = case(name)
    assert res.violations == [], "\n".join(map(str, res.violations))
    assert "determinism" in res.checked and "correctness" in res.checked
    assert not res.run.hung and res.run.startup_error is None
    # every fault the scenario brings actually fired
    assert all(n > 0 for n in res.fired.values()), res.fired


def test_scenarios_cover_the_seed():
    assert set(SEED_SCENARIOS) <= set(SCENARIOS)


# -- two servers on one host (identity) ----------------------------------------------------


def test_two_servers_bind_distinct_sockets_and_prompts_do_not_cross():
    res = case("two_servers")
    run = res.run
    assert run.startup_error is None
    binds = [e.data for e in run.trace.of(Ev.BIND)]
    assert [b["server"] for b in binds] == ["S1", "S2"]
    p1, p2 = (b["path"] for b in binds)
    assert p1 != p2
    assert "-r35849-dp0" in p1 and "-r34969-dp0" in p2
    assert len(list(run.trace.of(Ev.UNBIND))) == 2
    seen = lookups(run)
    # X and Y share a 1024-token few-shot prefix, which is all a crossed send may hit
    crossed = [d for rid, d in seen.items() if rid.endswith("-b")]
    assert len(crossed) == 2 and all(d["kv_hit"] <= 1024 for d in crossed)
    # after both restart (HBM gone), each prompt hits its own server's tier
    own = [d for rid, d in seen.items() if rid.endswith("-c")]
    assert len(own) == 2 and all(d["hbm_hit"] == 0 and d["claim"] >= 1024 for d in own)


def test_two_servers_without_ports_refuse_to_share_a_socket(short_tmp):
    run = SCENARIOS["two_servers"].run(RunContext(ports=(0, 0)))
    assert run.startup_error is not None
    assert "engine_kvfault-offload-dp0_service_lookup_rpc_port_0" in run.startup_error
    assert "already served by a live server" in run.startup_error
    binds = list(run.trace.of(Ev.BIND))
    assert len(binds) == 1  # the second server never bound the path
    (stop,) = run.trace.of(Ev.STOP)
    assert stop.data["error"] == "EngineIdentityConflict" and stop.data["server"] == "S2"
    # nothing left behind: no socket file, no rpc directory
    assert os.listdir(short_tmp) == []


def test_two_servers_leave_nothing_behind(short_tmp):
    run = SCENARIOS["two_servers"].run(RunContext())
    assert run.startup_error is None
    assert os.listdir(short_tmp) == []


# -- two pictures with the same text (keys) --------------------------------------------------


def test_two_images_never_share_a_key_and_b_never_hits_a():
    res = case("two_images")
    run = res.run
    reqs = list(run.requests.values())
    assert len({r.prompt_token_ids for r in reqs}) == 1  # same ids throughout
    seeds = {r.cache_seed for r in reqs}
    assert len(seeds) == 2
    keys: dict[tuple[str, str], set[int]] = {}
    for e in run.trace.of(Ev.KEY):
        keys.setdefault((e.data["site"], e.data["first"]), set()).add(e.data["seed"])
    assert {site for site, _ in keys} >= {"hbm", "lookup", "load", "save", "state"}
    assert all(len(s) == 1 for s in keys.values())
    # same media, same keys: each picture has one key per site across its three sends
    per_site = {}
    for site, _ in keys:
        per_site[site] = per_site.get(site, 0) + 1
    assert per_site["lookup"] == 2 and per_site["state"] == 2
    seen = lookups(run)
    a0, b1 = reqs[0], reqs[1]
    assert a0.req_id.endswith("-p0") and b1.req_id.endswith("-p1")
    assert seen[b1.req_id]["kv_hit"] == 0 and seen[b1.req_id]["claim"] == 0
    for r in reqs[2:]:  # both sent again: each hits its own
        assert seen[r.req_id]["claim"] > 0


# -- restart with the tier kept on the MP grid (anchors) ----------------------------------------


def test_restart_tier_kept_resumes_at_the_floored_anchor():
    res = case("restart_tier_kept")
    run = res.run
    geo = run.config.geometry
    assert run.config.state_grid == "chunk"
    # the seed: 38% with anchors off the grid, 88% with them on it
    assert res.notes["pass2_hit_rate"] >= 0.85
    saves = [e.data["position"] for e in run.trace.of(Ev.STATE_SAVE)]
    assert saves and all(p % geo.chunk_size == 0 for p in saves)
    seen = lookups(run)
    pass2 = [r for rid, r in run.requests.items() if rid.endswith("-pass2")]
    assert len(pass2) == 24
    for r in pass2:
        expected = geo.floor_chunk(geo.floor_block(r.prompt_len - 1))
        assert seen[r.req_id]["claim"] == expected, r.prompt_len


# -- a chunk-aligned hybrid prompt sent twice (hybrid hit) ------------------------------------------


def test_chunk_aligned_hybrid_loads_1920_tokens():
    res = case("chunk_aligned_hybrid")
    run = res.run
    assert res.notes["second_send_loaded"] == 1920  # legacy: 1792
    (second,) = [d for rid, d in lookups(run).items() if rid.endswith("-second")]
    assert (second["prompt_len"], second["kv_hit"], second["claim"]) == (2048, 2048, 1920)
    assert second["kv_end"] == 2048  # the KV leg moves the whole covering chunk
    (dispatch,) = [e for e in run.trace.of(Ev.DISPATCH) if e.req_id.endswith("-second")]
    assert (dispatch.data["start"], dispatch.data["kv_end"], dispatch.data["claim"]) == (
        0,
        2048,
        1920,
    )


# -- a restart burst behind slow forwards (deadline and bounds) ------------------------------------


def test_restart_burst_of_64_behind_slow_forwards_does_not_stop():
    res = case("restart_burst")
    run = res.run
    cfg = run.config
    assert res.stop is None and run.stop is None
    assert res.fired == {"slow_forward": 4}  # 29 s and 21 s, before and after the restart
    evs = since_last_restart(run)
    dispatch = {e.op: e for e in evs if e.kind is Ev.DISPATCH}
    assert len(dispatch) == 64
    assert len({e.step for e in dispatch.values()}) == 1  # the whole burst in one step
    forwards = [e.data["duration"] for e in evs if e.kind is Ev.FORWARD_START]
    assert forwards[:2] == [29.0, 21.0]
    submit = {e.op: e.t for e in evs if e.kind is Ev.RETRIEVE_SUBMIT}
    enqueue = {e.op: e.t for e in evs if e.kind is Ev.COPY_ENQUEUE}
    applied = {e.op: e.t for e in evs if e.kind is Ev.COMPLETION_APPLIED}
    assert set(applied) == set(dispatch)
    # what makes the legacy heads stop: copies enqueued more than D after their
    # retrieve's submission, and loads terminal more than B after their dispatch
    assert max(enqueue[o] - submit[o] for o in enqueue) > cfg.transfer_deadline_s
    assert max(applied[o] - dispatch[o].t for o in applied) > cfg.bound_s
    restarts = [e for e in evs if e.kind is Ev.BOUND_RESTART]
    assert len(restarts) == 63
    assert len(run.requests) == 64 * 2 + 2
    assert len(list(run.trace.of(Ev.OUTPUT))) == len(run.requests)


# -- a lost completion in the middle of a burst (liveness) --------------------------------------------


def test_lost_completion_stops_naming_the_op_within_one_bound_of_its_predecessors():
    res = case("lost_completion_burst")
    run = res.run
    cfg = run.config
    stop = run.stop
    assert type(stop).__name__ == "LoadNotTerminal"
    (fault,) = run.trace.of(Ev.FAULT)
    assert fault.data["injector"] == "lost_completion"
    assert stop.op == fault.op  # the stop names the lost load
    assert str(fault.op) in str(stop)
    (stop_ev,) = run.trace.of(Ev.STOP)
    assert stop_ev.op == fault.op and stop_ev.data["error"] == "LoadNotTerminal"
    evs = since_last_restart(run)
    order = [e.op for e in evs if e.kind is Ev.DISPATCH]
    applied = {
        e.op: e.t for e in evs if e.kind is Ev.COMPLETION_APPLIED and not e.data.get("stale")
    }
    pos = order.index(fault.op)
    assert pos == 31  # the 32nd load of the burst
    before = [applied[o] for o in order[:pos]]
    assert len(before) == pos  # every load ahead of it finished
    after = [applied[o] for o in order[pos + 1 :] if o in applied]
    assert after and max(after) > max(before) + 30  # traffic kept flowing meanwhile
    last = max(before)
    longest_forward = max(e.data["duration"] for e in evs if e.kind is Ev.FORWARD_START)
    assert cfg.bound_s < stop_ev.t - last <= cfg.bound_s + longest_forward + cfg.idle_tick_s
    assert stop.elapsed == pytest.approx(stop_ev.t - last)
    assert fault.op not in applied


def test_determinism_catches_a_rerun_that_differs():
    """The re-run is compared event by event and digested only when it differs: a
    re-run whose request ids differ is a determinism violation naming both digests."""
    from dataclasses import replace

    res = run_case("two_images", 0, replay_map=lambda r: replace(r, req_id=r.req_id + "-other"))
    (v,) = [v for v in res.violations if v.prop == "determinism"]
    assert v.message.startswith("same seed, different traces (" + res.digest[:12] + " vs ")
    assert run_case("two_images", 0).ok
