"""Each property against a stack broken on purpose (a monkeypatched collaborator of
``reference/``, never an edit): the healthy stack passes, the broken one is caught.

These are the hand-made breaks that showed each property catches what nothing caught
before it; a property weakened until it misses its break goes red here.
"""

from __future__ import annotations

import pytest

from kvfault.faults.campaign import run_case
from kvfault.reference.stack import Scheduler


def _props(result) -> set[str]:
    return {v.prop for v in result.violations}


@pytest.fixture
def bounds_before_apply(monkeypatch):
    """The scheduler checks its load bounds before applying the completions already
    in its inbox: a finished load's bound runs out although its completion arrived."""
    apply, check = Scheduler.apply, Scheduler.check_bounds

    def deferred_apply(self, completions):
        self._deferred = list(completions)

    def check_then_apply(self):
        check(self)
        apply(self, getattr(self, "_deferred", []))
        self._deferred = []

    monkeypatch.setattr(Scheduler, "apply", deferred_apply)
    monkeypatch.setattr(Scheduler, "check_bounds", check_then_apply)


def test_no_false_stop_holds_on_the_healthy_burst():
    assert "no_false_stop" not in _props(
        run_case("small_restart_burst", 0, properties=["no_false_stop"])
    )


def test_a_stop_on_a_delivered_but_unapplied_completion_is_false(bounds_before_apply):
    res = run_case("small_restart_burst", 0, properties=["no_false_stop"])
    assert res.stop and "LoadNotTerminal" in res.stop
    (v,) = [v for v in res.violations if v.prop == "no_false_stop"]
    assert "had reached the scheduler" in v.message


def test_a_lost_completion_still_justifies_the_stop():
    res = run_case("lost_completion_burst", 0, properties=["no_false_stop", "liveness"])
    assert res.stop and "LoadNotTerminal" in res.stop
    assert res.ok, [str(v) for v in res.violations]


# -- efficiency ---------------------------------------------------------------------------


def test_efficiency_holds_on_the_healthy_stack():
    assert "efficiency" not in _props(run_case("restart_tier_kept", 0, properties=["efficiency"]))


def test_a_lookup_that_never_matches_its_saves_is_a_silent_miss(monkeypatch):
    """The scheduler asks the tier with ids that are not the ones it saves under:
    outputs stay right (it recomputes), only efficiency sees the loss."""
    import kvfault.reference.stack.scheduler as sched

    query = sched.LookupQuery
    monkeypatch.setattr(
        sched, "LookupQuery", lambda ids, states: query(tuple(i ^ 1 for i in ids), states)
    )
    res = run_case("restart_tier_kept", 0, properties=["correctness", "efficiency"])
    assert _props(res) == {"efficiency"}
    assert any("silent miss" in v.message for v in res.violations)


def test_a_claim_never_loaded_is_caught(monkeypatch):
    """The scheduler claims a tier hit and then starts from its HBM hit (loads nothing)."""
    monkeypatch.setattr(
        Scheduler,
        "_dispatch_load",
        lambda self, seq, plan, meta: self._start_running(seq, seq.hbm_hit),
    )
    res = run_case("restart_tier_kept", 0, properties=["correctness", "efficiency"])
    assert _props(res) == {"efficiency"}
    assert any("never loaded" in v.message for v in res.violations)


def test_a_save_of_content_already_stored_late_is_no_silent_miss():
    """The swarm finding of issue 19: under ``late_visibility`` with ``p=0.5`` one save
    puts a shared few-shot chunk in the tier late, a later prompt save of the same
    content is acknowledged at once, and pass 2's lookup misses the chunk. The tier
    is right (a store of a chunk it holds writes nothing); the property used to take
    the earliest visibility of any save and called this a silent miss."""
    from kvfault.faults.injectors import FaultPlan, FaultSpec
    from kvfault.faults.properties.content import ContentChains
    from kvfault.reference.trace import Ev
    from kvfault.reference.types import OpKind

    plan = FaultPlan((FaultSpec.of("late_visibility", nth=(7, 11), p=0.5),), 0)
    res = run_case("restart_tier_kept", 0, injectors=plan.injectors, properties=["efficiency"])
    assert res.ok, [str(v) for v in res.violations]
    # The run holds the situation: a chunk first written late, written again promptly
    # before it became visible, and a lookup of it in between that missed it.
    run = res.run
    chains = ContentChains(run)
    chunk = run.config.geometry.chunk_size
    late = {e.op: e.t + e.data["delay_s"] for e in run.trace.of(Ev.FAULT)}
    first: dict[int, float] = {}  # chunk key -> visible at, as the tier stamps it
    rewritten_early: dict[int, float] = {}  # chunk key -> a later save's own time
    ranges = {e.op: (e.data["start"], e.data["end"]) for e in run.trace.of(Ev.SAVE)}
    missed = False
    for ev in run.trace.events:
        if ev.kind is Ev.FINISHED_REPORTED and ev.op.kind is OpKind.SAVE:
            start, end = ranges[ev.op]
            chain = chains.of(ev.req_id)
            for key in chain[start // chunk : end // chunk]:
                if key not in first:
                    first[key] = late.get(ev.op, ev.t)
                elif late.get(ev.op, ev.t) < first[key]:
                    rewritten_early[key] = late.get(ev.op, ev.t)
        elif ev.kind is Ev.LOOKUP:
            chain = chains.of(ev.req_id)
            n = ev.data["kv_hit"] // chunk
            if n < len(chain) and chain[n] in rewritten_early:
                missed |= rewritten_early[chain[n]] <= ev.t < first[chain[n]]
    assert missed


def test_a_silent_miss_is_still_caught_under_late_visibility(monkeypatch):
    """With late and prompt saves mixed, a lookup that never matches its saves is
    still a silent miss."""
    import kvfault.reference.stack.scheduler as sched
    from kvfault.faults.injectors import FaultPlan, FaultSpec

    query = sched.LookupQuery
    monkeypatch.setattr(
        sched, "LookupQuery", lambda ids, states: query(tuple(i ^ 1 for i in ids), states)
    )
    plan = FaultPlan((FaultSpec.of("late_visibility", nth=(7, 11), p=0.5),), 0)
    res = run_case("restart_tier_kept", 0, injectors=plan.injectors, properties=["efficiency"])
    assert any("silent miss" in v.message for v in res.violations)


# -- exactly once -------------------------------------------------------------------------


def test_exactly_once_holds_on_the_healthy_stack():
    res = run_case("restart_burst", 0, properties=["exactly_once"])
    assert res.ok, [str(v) for v in res.violations]


def test_a_reused_operation_id_is_caught(monkeypatch):
    monkeypatch.setattr(Scheduler, "_next_generation", lambda self: 1)
    res = run_case("restart_tier_kept", 0, properties=["correctness", "exactly_once"])
    assert "exactly_once" in _props(res)
    assert any("operation id reused" in v.message for v in res.violations)


# -- resources ----------------------------------------------------------------------------


def test_resources_hold_on_the_healthy_stack():
    res = run_case("two_images", 0, properties=["resources"])
    assert res.ok, [str(v) for v in res.violations]


def test_a_finished_request_that_keeps_its_blocks_is_caught(monkeypatch):
    """The scheduler forgets to free a finished request's HBM blocks: with a pool this
    large nothing else notices."""
    from kvfault.reference.stack import BlockPool, UncachedBlockPool

    for pool in (BlockPool, UncachedBlockPool):  # whichever the scenario's engine takes
        monkeypatch.setattr(pool, "free", lambda self, blocks: None)
    res = run_case("two_images", 0, properties=["correctness", "liveness", "resources"])
    assert _props(res) == {"resources"}
    assert any("hbm_blocks=" in v.message for v in res.violations)


def test_a_late_completion_meets_a_reused_operation_id(monkeypatch):
    """Operation ids that start again with every engine build: a completion from
    before a crash arrives after it and is applied to the new scheduler's load of the
    same request, whose pages were never copied (the fixed stack continues the ids)."""
    from kvfault.faults.injectors import FaultPlan, FaultSpec
    from kvfault.reference.stack import Engine

    plan = FaultPlan((FaultSpec.of("late_completion", nth=[1]),), 0)
    healthy = run_case("late_completion_after_restart", 0, injectors=plan.injectors)
    assert healthy.ok and healthy.fired["late_completion"] == 1, healthy.violations
    build = Engine._build
    monkeypatch.setattr(Engine, "_build", lambda self, generation: build(self, 0))
    res = run_case("late_completion_after_restart", 0, injectors=plan.injectors)
    assert {"correctness", "exactly_once"} <= _props(res)
    assert any("operation id reused" in v.message for v in res.violations)


# -- correctness, with cold runs shared between runs -------------------------------------


def test_correctness_judges_each_run_against_the_cold_run_whatever_ran_before():
    """The cold outputs one run's check computed are kept for the next run of the same
    scenario and seed. They are the cold run's, never what a run produced, and they
    belong to whole requests (a picture's cache seed included): a wrong run is caught
    before and after a right one, and the right one passes."""
    from kvfault.faults.regressions import REGRESSIONS

    def check(rules=None):
        return run_case("two_images", 5, rules=rules, properties=["correctness"])

    legacy = REGRESSIONS["side_chain_seed"].rules  # outputs differ from the cold run's
    first, right, again = check(legacy), check(), check(legacy)
    assert [v.message for v in right.violations] == []
    for wrong in (first, again):
        assert any("differs from its cold run" in v.message for v in wrong.violations)


# -- blind spots of issue 19: a load under other keys, two owners of one HBM block ----------


def _load_sends_raw_ids(monkeypatch):
    """The load sends the prompt's raw ids (media ignored) while the lookup and the
    saves use the media's tier ids: it fails like an eviction and the stack recomputes."""
    import dataclasses

    dispatch = Scheduler._dispatch_load

    def raw_load(self, seq, plan, meta):
        dispatch(self, seq, plan, meta)
        meta.loads[-1] = dataclasses.replace(meta.loads[-1], tier_ids=seq.req.prompt_token_ids)

    monkeypatch.setattr(Scheduler, "_dispatch_load", raw_load)


def test_a_load_under_other_keys_than_its_saves_is_an_unexplained_failure(monkeypatch):
    healthy = run_case("two_images", 0)
    assert healthy.ok, [str(v) for v in healthy.violations]
    _load_sends_raw_ids(monkeypatch)
    res = run_case("two_images", 0)
    # Outputs stay right (the stack recomputes): before these checks nothing failed.
    assert _props(res) == {"keys", "load_failures"}, [str(v) for v in res.violations]
    assert any("no injected fault explains it" in v.message for v in res.violations)
    assert any("sent the same content" in v.message for v in res.violations)


def test_a_load_failure_an_injected_fault_explains_is_no_violation():
    from kvfault.faults.injectors import FaultPlan, FaultSpec

    for name in ("retrieve_failure", "evict_after_lookup"):
        plan = FaultPlan((FaultSpec.of(name, nth=(1, 2, 3)),), 0)
        res = run_case(
            "restart_tier_kept", 0, injectors=plan.injectors, properties=["load_failures"]
        )
        assert res.fired[name] and res.ok, [str(v) for v in res.violations]


def _free_ignores_references(monkeypatch):
    """The prefix-cache pool frees every block of a finished request at once, shared
    or not: a shared prefix block goes back to the free list while another request
    still holds it, and is handed out again."""
    from kvfault.reference.stack import BlockPool

    def free(self, blocks):
        for b in blocks:
            self._refs.pop(b, None)
            if b not in self._free:
                self._free.extend([b])

    monkeypatch.setattr(BlockPool, "free", free)


def test_a_block_with_two_live_owners_is_caught(monkeypatch):
    assert run_case("hbm_pressure", 0).ok
    _free_ignores_references(monkeypatch)
    res = run_case("hbm_pressure", 0)
    # No allocator error and no wrong output: only the ownership check sees it.
    assert _props(res) == {"hbm_owners"}, [str(v) for v in res.violations]
    assert any("while" in v.message and "holds it" in v.message for v in res.violations)


def _images_stored_under_other_keys(monkeypatch):
    """Each state image a save stores goes under another key than the one a lookup of
    its position asks for (the worker is handed a garbled name): no lookup finds it,
    and a hit claims less. The claim still equals the joint boundary of what the
    lookup *reports*, so a check of the claim against the report sees nothing, and the
    outputs stay right (the request recomputes)."""
    import dataclasses

    after = Scheduler.after_forward

    def misnamed(self, meta):
        done = after(self, meta)
        meta.saves[:] = [
            dataclasses.replace(s, states=tuple((p, key ^ 1) for p, key in s.states))
            for s in meta.saves
        ]
        return done

    monkeypatch.setattr(Scheduler, "after_forward", misnamed)


def test_state_images_saved_in_the_wrong_place_are_caught(monkeypatch):
    assert run_case("chunk_aligned_hybrid", 0).ok
    _images_stored_under_other_keys(monkeypatch)
    res = run_case("chunk_aligned_hybrid", 0)
    assert _props(res) == {"hybrid"}, [str(v) for v in res.violations]
    assert any("the joint boundary is 1920" in v.message for v in res.violations)


def test_a_state_image_no_hit_can_use_is_caught():
    """The prompt-end anchor at the last block boundary whatever the tier's KV reaches
    (the stack before issue 19, planted as ``anchor_past_full_chunks``): on
    ``two_images`` (876 tokens, 256-token chunks) the image at 864 lies past the 768
    tokens of full chunks, so no hit ever uses it; nothing else notices."""
    from kvfault.faults.regressions import REGRESSIONS

    rules = REGRESSIONS["anchor_past_full_chunks"].rules
    res = run_case("two_images", 0, rules=rules, properties=["correctness", "hybrid", "efficiency"])
    assert _props(res) == {"hybrid"}, [str(v) for v in res.violations]
    assert any("state image at 864" in v.message for v in res.violations)


def test_the_joint_boundary_counts_only_images_the_tier_keeps():
    """A tier that keeps state images on its chunk grid only (the real MP server) under
    a story whose stack cuts on the block grid: the image at 1920 is sent and dropped,
    so the derived joint boundary is 1792, as claimed (the tier's grid comes from what
    the worker recorded sending, not from the stack's configuration)."""
    from kvfault.fakes import MemoryTier
    from kvfault.faults.properties import hybrid
    from kvfault.faults.runs import RunContext
    from kvfault.faults.scenarios import SCENARIOS

    ctx = RunContext(seed=0)
    ctx.tier_factory = lambda world, config: MemoryTier(world.clock, config.geometry, "chunk")
    run = SCENARIOS["chunk_aligned_hybrid"].run(ctx)
    assert run.notes["second_send_loaded"] == 1792
    assert hybrid(run) == []


def _lost_store_answer_tier(world, config):  # type: ignore[no-untyped-def]
    """A MemoryTier whose first store past the first chunk that carries state images
    keeps its data and answers failure: the answer lost after the write, as a dropped
    ``commit_store`` reply does on the real server (issue 34, item 15)."""
    from kvfault.fakes import MemoryTier
    from kvfault.reference.interfaces import TierReply

    class LostAnswer(MemoryTier):
        lost: object = None

        def submit_store(self, op, tier_ids, start, end, pages, states):  # type: ignore[no-untyped-def]
            ticket = super().submit_store(op, tier_ids, start, end, pages, states)
            if self.lost is None and states and start > 0:
                self.lost = ticket
            return ticket

        def poll(self, ticket):  # type: ignore[no-untyped-def]
            reply = super().poll(ticket)
            if reply is not None and ticket is self.lost:
                return TierReply(ok=False, error="store not answered")
            return reply

    return LostAnswer(world.clock, config.geometry, "chunk")


def test_a_hit_on_what_a_failed_save_wrote_is_no_hybrid_violation():
    """A save reported failed may have written anyway: a later hit that claims the
    images it wrote is right (the outputs are), and the boundary it claims is one such
    writes could make. Before the fix the judge counted only finished saves and failed
    the fixed stack (``claims 1792 ...; the joint boundary is 256``)."""
    from kvfault.faults.properties import correctness, hybrid
    from kvfault.faults.runs import RunContext
    from kvfault.faults.scenarios import SCENARIOS

    ctx = RunContext(seed=0)
    ctx.tier_factory = _lost_store_answer_tier
    run = SCENARIOS["chunk_aligned_hybrid"].run(ctx)
    assert run.notes["second_send_loaded"] == 1792  # the hit used the failed save's data
    assert correctness(run) == []
    assert hybrid(run) == []
