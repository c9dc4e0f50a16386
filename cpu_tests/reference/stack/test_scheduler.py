"""Scheduler-side connector (docs/design.md: #the-step-loop, #keys, #load-bounds,
#chunk-grid-anchors-and-hybrid-hits): key sites, exact
operations, dispatch order, bounds, loadable hits, prefill and saves, driven step by
step on a virtual clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfault.fakes import SimWorld, Workloads
from kvfault.reference import (
    Completion,
    Ev,
    Geometry,
    LoadNotTerminal,
    OperationId,
    OpKind,
    Outcome,
    Request,
    Rules,
)
from kvfault.reference.rules import media_cache_seed, tier_token_ids
from kvfault.reference.stack import EngineConfig

GEO = Geometry(16, 256, 2048, 1024)
ALIGNED = Geometry(128, 256, 2048, 256)


def stored_tier(geo, kind, grid, reqs):
    """A tier holding what one engine stored running ``reqs`` (its KV and states)."""
    world = SimWorld()
    cfg = EngineConfig(geometry=geo, model_kind=kind, state_grid=grid)
    tier = world.memory_tier(cfg)
    engine = world.engine(cfg, tier=tier)
    for r in reqs:
        engine.add_request(r)
    out = engine.run()
    assert out.stopped is None and not out.hung
    world.clock.sleep(1.0)
    return tier


def prompts(n, length, seed=3):
    w = Workloads(seed)
    return [Request(w.request_id(), w.prompt(length)) for _ in range(n)]


def again(req, tag="2"):
    return replace(req, req_id=f"{req.req_id}-{tag}")


def reloading(rig, reqs, geo=GEO, kind="dense", grid="block"):
    """A scheduler rig on a tier that already holds ``reqs``, with each sent again."""
    r = rig(geo, kind, grid, tier=stored_tier(geo, kind, grid, reqs))
    for q in reqs:
        r.sched.add(again(q))
    return r


def test_duplicate_request_ids_are_refused(rig):
    r = rig(GEO)
    (req,) = prompts(1, 100)
    r.sched.add(req)
    with pytest.raises(ValueError, match="duplicate"):
        r.sched.add(req)


# -- keys: every site goes through rules.tier_ids ------------------------------------------


def test_every_key_site_uses_tier_ids(rig):
    seen = []

    def spy(req, end):
        seen.append((req.req_id, end))
        return tier_token_ids(req, end)

    media = (b"picture",)
    (base,) = prompts(1, 700)
    req = replace(base, cache_seed=media_cache_seed(media), media=media)
    r = rig(GEO, rules=Rules(tier_ids=spy))
    queries = []
    lookup = r.tier.lookup
    r.tier.lookup = lambda q: queries.append(q) or lookup(q)
    r.sched.add(req)
    meta = r.step()
    r.sched.after_forward(meta)
    ids = tier_token_ids(req)
    assert seen == [(req.req_id, None)]
    assert queries[0].tier_ids == ids != req.prompt_token_ids
    (save,) = meta.saves
    # The whole prompt's tier ids (one tuple for every site); the tier reads [0, end).
    assert save.tier_ids is r.sched.seq(req.req_id).tier_ids
    assert save.tier_ids == ids and save.end == 512
    sites = {e.data["site"] for e in r.trace.of(Ev.KEY)}
    assert sites == {"hbm", "lookup", "save"}


def test_media_keys_reach_the_load_and_the_hbm_chain(rig):
    (base,) = prompts(1, 700)
    a = replace(base, req_id="a", cache_seed=media_cache_seed((b"A",)), media=(b"A",))
    b = replace(base, req_id="b", cache_seed=media_cache_seed((b"B",)), media=(b"B",))
    r = reloading(rig, [a])
    meta = r.step()
    (load,) = meta.loads
    assert load.tier_ids == tier_token_ids(a) and load.kv_end == load.claim == 512
    # HBM: the same picture reuses its cached blocks, another picture does not
    r.sched.after_forward(meta)
    r.sched.add(b)
    r.sched.add(again(b, "3"))
    r.step([Completion(load.op, Outcome.FINISHED)])
    assert r.sched.seq("b").hbm_hit == 0
    assert r.sched.seq("b").load is None  # b finds nothing of a in the tier either


# -- exact operations --------------------------------------------------------------------------


def test_a_completion_for_another_generation_never_retires_a_load(rig):
    reqs = prompts(2, 600)
    r = reloading(rig, reqs)
    meta = r.step()
    o1, o2 = (x.op for x in meta.loads)
    assert o1.generation != o2.generation
    stale = OperationId(o1.req_id, o1.generation + 100)
    r.step(
        [
            Completion(stale, Outcome.FINISHED),
            Completion(OperationId(o2.req_id, 0), Outcome.FINISHED),
        ]
    )
    assert r.sched.bounds.is_active(o1) and r.sched.bounds.is_active(o2)
    applied = list(r.trace.of(Ev.COMPLETION_APPLIED))
    assert [e.data.get("stale") for e in applied] == [True, True]
    r.step([Completion(o1, Outcome.FINISHED)])
    assert not r.sched.bounds.is_active(o1)
    r.step([Completion(o1, Outcome.FINISHED)])  # a second report is stale
    assert list(r.trace.of(Ev.COMPLETION_APPLIED))[-1].data.get("stale") is True


def test_generations_are_unique_over_loads_and_saves(rig):
    reqs = prompts(3, 900)
    tier = stored_tier(GEO, "dense", "block", reqs[:2])
    r = rig(GEO, tier=tier)
    for q in (again(reqs[0]), again(reqs[1]), reqs[2]):
        r.sched.add(q)
    gens = []
    meta = r.step()
    gens += [x.op.generation for x in meta.loads]
    r.sched.after_forward(meta)
    gens += [s.op.generation for s in meta.saves]
    assert meta.saves and meta.loads
    assert len(gens) == len(set(gens))
    assert {s.op.kind for s in meta.saves} == {OpKind.SAVE}


# -- dispatch order and bounds -------------------------------------------------------------


def test_loads_dispatch_in_arrival_order_and_bounds_follow_it(rig):
    reqs = prompts(8, 600)
    r = reloading(rig, reqs)
    meta = r.step()
    order = [x.op for x in meta.loads]
    assert [o.req_id for o in order] == [again(q).req_id for q in reqs]
    assert [e.op for e in r.trace.of(Ev.DISPATCH)] == order
    assert r.sched.bounds.dispatched_after(order[0]) == order[1:]
    assert list(set(order)) != order  # hash order differs: the dict, not a set, decides


def test_a_finish_restarts_the_bounds_of_loads_dispatched_after_it(rig):
    reqs = prompts(4, 600)
    r = reloading(rig, reqs)
    o = [x.op for x in r.step().loads]
    r.clock.sleep(35.0)
    r.step([Completion(o[1], Outcome.FINISHED)])
    (ev,) = r.trace.of(Ev.BOUND_RESTART)
    assert ev.op == o[1] and ev.data["restarted"] == [str(o[2]), str(o[3])]
    r.clock.sleep(5.5)  # t=40.5: o1 (dispatched before o2) is past its bound
    with pytest.raises(LoadNotTerminal) as info:
        r.step()
    assert info.value.op == o[0]
    assert info.value.elapsed == pytest.approx(40.5)
    assert str(o[0]) in str(info.value) and "40.500s" in str(info.value)


def test_a_lost_completion_stops_one_bound_after_its_predecessors(rig):
    reqs = prompts(4, 600)
    r = reloading(rig, reqs)
    o = [x.op for x in r.step().loads]
    r.clock.sleep(10.0)
    r.step([Completion(o[0], Outcome.FINISHED)])  # o2's bound restarts at 10
    r.clock.sleep(20.0)
    r.step([Completion(o[2], Outcome.FINISHED), Completion(o[3], Outcome.FINISHED)])
    r.clock.sleep(19.9)  # t=49.9: 39.9 s since o1 finished
    r.step()
    r.clock.sleep(0.2)
    with pytest.raises(LoadNotTerminal) as info:
        r.step()
    assert info.value.op == o[1]
    assert info.value.elapsed == pytest.approx(40.1)


def test_a_failed_load_recomputes_from_what_hbm_holds(rig):
    (req,) = prompts(1, 600)
    r = reloading(rig, [req])
    (load,) = r.step().loads
    meta = r.step([Completion(load.op, Outcome.FAILED, "boom")])
    assert meta.compute == [(load.op.req_id, 0, 600)]
    assert not r.sched.bounds.is_active(load.op)
    assert not list(r.trace.of(Ev.BOUND_RESTART))


def test_a_finished_load_resumes_at_its_claim(rig):
    (req,) = prompts(1, 600)
    r = reloading(rig, [req])
    meta = r.step()
    (load,) = meta.loads
    assert meta.compute == []  # loading: nothing to compute yet
    assert (load.start, load.kv_end, load.claim) == (0, 512, 512)
    assert load.blocks == tuple(r.sched.seq(load.op.req_id).blocks[:32])
    meta = r.step([Completion(load.op, Outcome.FINISHED)])
    assert meta.compute == [(load.op.req_id, 512, 600)]


# -- loadable hits as the scheduler applies them --------------------------------------------------


def test_dense_full_prompt_hit_gives_back_a_chunk(rig):
    (req,) = prompts(1, 1024)
    r = reloading(rig, [req])
    (load,) = r.step().loads
    assert (load.kv_end, load.claim) == (768, 768)
    (lookup,) = r.trace.of(Ev.LOOKUP)
    assert lookup.data["kv_hit"] == 1024


def test_hybrid_full_prompt_hit_claims_the_joint_boundary(rig):
    (req,) = prompts(1, 2048)
    r = reloading(rig, [req], ALIGNED, "hybrid", "block")
    (load,) = r.step().loads
    assert (load.start, load.kv_end, load.claim) == (0, 2048, 1920)
    assert load.state_key is not None
    assert len(load.blocks) == 16
    meta = r.step([Completion(load.op, Outcome.FINISHED)])
    assert meta.compute == [(load.op.req_id, 1920, 2048)]


def test_hybrid_on_the_mp_grid_claims_the_floored_anchor(rig):
    (req,) = prompts(1, 2048)
    r = reloading(rig, [req], ALIGNED, "hybrid", "chunk")
    (load,) = r.step().loads
    assert (load.kv_end, load.claim) == (1792, 1792)
    (lookup,) = r.trace.of(Ev.LOOKUP)
    assert max(lookup.data["states"]) == 1792


# -- HBM prefix hits --------------------------------------------------------------------------------


def _took(r, req):
    (took,) = [e.data for e in r.trace.of(Ev.BLOCKS) if e.req_id == req.req_id and "took" in e.data]
    return took


def _written_blocks(r, meta):
    """Each computing request's blocks that this step's forward writes."""
    bs = r.sched.geometry.block_size
    return {q: r.sched.seq(q).blocks[s // bs : -(-e // bs)] for q, s, e in meta.compute}


def test_a_resent_prompt_shares_only_the_cached_blocks_before_its_last_token(rig):
    (a,) = prompts(1, 32)  # two whole blocks: a full HBM prefix hit when sent again
    r = rig(GEO)
    r.sched.add(a)
    r.sched.after_forward(r.step())  # a computes [0, 32) and caches both blocks
    b = again(a)
    r.sched.add(b)
    meta = r.step()
    sa, sb = r.sched.seq(a.req_id), r.sched.seq(b.req_id)
    # The last token is computed, so the block holding it is b's own, not a's.
    assert sb.hbm_hit == 16 and _took(r, b)["shared"] == 1
    assert sb.blocks[0] == sa.blocks[0] and sb.blocks[1] != sa.blocks[1]
    assert meta.compute == [(b.req_id, 16, 32)]
    assert not set(_written_blocks(r, meta)[b.req_id]) & set(sa.blocks)


def test_a_whole_block_prompt_resent_after_its_block_was_freed_takes_a_block_of_its_own(rig):
    # The story of the generated scenario that found it: a one-block prompt, freed, sent
    # again twice at once. Each resend computes its only block, so neither may take the
    # cached one (both did, and one overwrote the other's page before its output).
    (a,) = prompts(1, 16)
    a = replace(a, max_output_tokens=1)
    r = rig(GEO)
    r.sched.add(a)
    (done,) = r.sched.after_forward(r.step())
    r.sched.prefill_done(done)  # one output token: finished, its block freed and cached
    (freed,) = r.sched.seq(a.req_id).blocks
    b, c = again(a, "b"), again(a, "c")
    r.sched.add(b)
    r.sched.add(c)
    meta = r.step()
    for q in (b, c):
        assert r.sched.seq(q.req_id).hbm_hit == 0 and _took(r, q)["shared"] == 0
        assert freed not in r.sched.seq(q.req_id).blocks
    written = _written_blocks(r, meta)
    assert set(written) == {b.req_id, c.req_id}
    assert not set(written[b.req_id]) & set(written[c.req_id])


# -- prefill and saves -----------------------------------------------------------------------------


def test_prefill_budget_is_shared_in_arrival_order(rig):
    r = rig(Geometry(16, 256, 1024, 1024))
    a, b = prompts(2, 700)
    r.sched.add(a)
    r.sched.add(b)
    meta = r.step()
    assert meta.compute == [(a.req_id, 0, 700), (b.req_id, 0, 324)]
    assert r.sched.after_forward(meta) == [a.req_id]
    r.sched.prefill_done(a.req_id)
    meta = r.step()
    assert meta.compute == [(b.req_id, 324, 700)]
    assert meta.decode == [a.req_id]


def test_saves_are_whole_chunks_in_order(rig):
    r = rig(Geometry(16, 256, 300, 1024))
    (req,) = prompts(1, 700)
    r.sched.add(req)
    ranges = []
    for _ in range(3):
        meta = r.step()
        r.sched.after_forward(meta)
        ranges += [(s.start, s.end) for s in meta.saves]
    assert ranges == [(0, 256), (256, 512)]  # the 188-token tail is never stored


def test_hybrid_saves_state_images_only_at_anchors(rig):
    r = rig(GEO, "hybrid", "chunk")
    (req,) = prompts(1, 1000)
    r.sched.add(req)
    states = []
    for _ in range(3):
        meta = r.step()
        r.sched.after_forward(meta)
        states += [p for s in meta.saves for p, _ in s.states]
    assert states == [768]
    assert [e.data["position"] for e in r.trace.of(Ev.ANCHOR)] == [768]


def test_requests_wait_for_their_arrival_and_for_free_blocks(rig):
    r = rig(GEO, num_blocks=64)
    big, small = prompts(2, 1000)
    small = replace(small, prompt_token_ids=small.prompt_token_ids[:100], max_output_tokens=5)
    r.sched.add(replace(big, arrival_time=5.0))
    r.sched.add(small)
    assert r.sched.next_arrival() == 0.0
    admitted_at = {}
    for _ in range(10):
        meta = r.step()
        for req_id, _, _ in meta.compute:
            admitted_at.setdefault(req_id, r.clock.now())
        for req_id in r.sched.after_forward(meta):
            r.sched.prefill_done(req_id)
        r.clock.sleep(2.0)
    # big arrives at 5 but needs 63 of the 64 blocks: it waits until small is done
    assert admitted_at[small.req_id] == 0.0
    assert admitted_at[big.req_id] == 10.0  # small decoded its last token at t=8
    assert r.sched.seq(small.req_id).phase.value == "done"


def test_admission_skips_what_does_not_fit_and_admits_what_does_behind_it(rig):
    """HBM admission keeps arrival order but does not block at the head: a request too
    big for the free blocks waits while shorter ones behind it are admitted, in order,
    until nothing waiting fits (where the scan stops)."""
    r = rig(GEO, num_blocks=100)  # 16-token blocks
    big = prompts(1, 1024 + 512, seed=4)  # 96 blocks
    small = prompts(3, 512, seed=5)  # 32 blocks each
    for req in [*small[:1], *big, *small[1:]]:
        r.sched.add(req)
    r.step()
    # small[0] takes 32 of 100: big (96) no longer fits; small[1] and small[2] do.
    assert [e.req_id for e in r.trace.of(Ev.LOOKUP)] == [s.req_id for s in small]
    assert r.pool.num_free == 4
    r.sched.add(prompts(1, 512, seed=6)[0])
    r.step()  # nothing fits in 4 blocks: nothing is looked up
    assert len(list(r.trace.of(Ev.LOOKUP))) == 3


def test_next_arrival_is_the_earliest_request_not_yet_arrived(rig):
    r = rig(GEO)
    assert r.sched.next_arrival() is None
    a, b = prompts(2, 300)
    r.sched.add(replace(a, arrival_time=7.0))
    r.sched.add(replace(b, arrival_time=3.0))
    assert r.sched.next_arrival() == 3.0
    r.clock.sleep(5.0)
    r.step()  # b arrives
    assert r.sched.next_arrival() == 7.0
    r.clock.sleep(5.0)
    r.step()
    assert r.sched.next_arrival() is None
