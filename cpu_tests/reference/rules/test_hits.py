"""Loadable hits (docs/design.md#chunk-grid-anchors-and-hybrid-hits, fix 4): the dense give-back and the hybrid joint
boundary. The rule's own functions here; the scheduler applying them in
test_scheduler.py; its scenario (a chunk-aligned hybrid prompt sent twice loads 1920
tokens) in test_scenarios.py; dense and hybrid over random prompts in
test_properties_hypothesis.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvfault.reference import Geometry
from kvfault.reference.rules import HitPolicy, LoadPlan, joint_boundary

GEO = Geometry(16, 256, 2048, 1024)
ALIGNED = Geometry(128, 256, 2048, 256)
hits = HitPolicy()


# -- dense: give back one token, then floor to the chunk grid ------------------------------


@pytest.mark.parametrize(
    "kv_hit, prompt_len, claim",
    [
        (2048, 2048, 1792),  # a full hit gives back one token, then loses the chunk
        (256, 256, 0),
        (2048, 2049, 2048),  # one token left to compute already
        (2048, 2100, 2048),
        (512, 1000, 512),
        (768, 1000, 768),
        (0, 1000, 0),
    ],
)
def test_dense(kv_hit, prompt_len, claim):
    assert hits.dense(kv_hit, prompt_len, GEO) == LoadPlan(kv_end=claim, claim=claim)


# -- hybrid: claim the joint boundary, transfer the chunk covering it ----------------------


def test_hybrid_chunk_aligned_prompt_claims_the_last_block_boundary():
    """The seed: 2048 tokens, 128-token blocks, state images at every block boundary:
    the request loads 1920 tokens (not 1792), and the KV leg moves the whole last chunk."""
    plan = hits.hybrid(2048, 2048, range(128, 2048 + 1, 128), ALIGNED)
    assert plan == LoadPlan(kv_end=2048, claim=1920, joint=1920)


def test_hybrid_on_the_mp_grid():
    plan = hits.hybrid(2048, 2048, range(256, 2048, 256), ALIGNED)
    assert plan == LoadPlan(kv_end=1792, claim=1792, joint=1792)


def test_hybrid_without_a_state_image_loads_nothing():
    assert hits.hybrid(2048, 2048, (), ALIGNED) == LoadPlan(0, 0, 0)
    assert hits.hybrid(0, 2048, (128,), ALIGNED) == LoadPlan(0, 0, 0)
    assert hits.hybrid(2048, 2048, (2048,), ALIGNED) == LoadPlan(0, 0, 0)


def test_hybrid_never_claims_past_the_kv_hit():
    plan = hits.hybrid(512, 2048, (128, 256, 640, 1024), ALIGNED)
    assert plan == LoadPlan(kv_end=256, claim=256, joint=256)
    # J inside a chunk the tier holds: the covering chunk is moved
    plan = hits.hybrid(512, 2048, (128, 384), ALIGNED)
    assert plan == LoadPlan(kv_end=512, claim=384, joint=384)
    # J on the chunk grid: nothing past it moves
    plan = hits.hybrid(1024, 2048, (256, 512), ALIGNED)
    assert plan == LoadPlan(kv_end=512, claim=512, joint=512)


def test_joint_boundary():
    assert joint_boundary(2048, 2048, (256, 1920, 2048)) == 1920
    assert joint_boundary(1024, 2048, (256, 1920)) == 256
    assert joint_boundary(1024, 2048, ()) == 0
    assert joint_boundary(1024, 1024, (1024,)) == 0


@st.composite
def hits_around_chunks(draw):
    block = draw(st.sampled_from([16, 64, 128]))
    geo = Geometry(block, block * draw(st.sampled_from([1, 2, 4])), 4096, block * 4)
    chunk = geo.chunk_size
    # prompts on, just below or just above a chunk boundary, or anywhere
    prompt_len = draw(
        st.builds(lambda k, d: k * chunk + d, st.integers(1, 8), st.sampled_from([-1, 0, 1]))
        | st.integers(1, 3000)
    )
    top = geo.floor_chunk(prompt_len)
    kv_hit = draw(st.just(top) | st.sampled_from(range(0, top + 1, chunk)))  # often full
    boundaries = range(block, prompt_len + block, block)
    states = draw(st.just(set(boundaries)) | st.sets(st.sampled_from(boundaries)))
    return geo, prompt_len, kv_hit, states


@given(hits_around_chunks())
def test_hit_invariants(drawn):
    geo, prompt_len, kv_hit, states = drawn
    d = hits.dense(kv_hit, prompt_len, geo)
    assert d.claim == d.kv_end <= kv_hit
    assert d.claim < prompt_len
    assert d.claim % geo.chunk_size == 0
    assert d.claim == geo.floor_chunk(min(kv_hit, prompt_len - 1))
    h = hits.hybrid(kv_hit, prompt_len, sorted(states), geo)
    # the joint boundary: the last state image at or below the KV hit, below the end
    assert (
        h.claim == h.joint == max((p for p in states if p <= kv_hit and p < prompt_len), default=0)
    )
    assert h.claim < prompt_len
    assert h.claim <= h.kv_end <= kv_hit
    assert h.kv_end == kv_hit or h.kv_end % geo.chunk_size == 0
    if h.claim:
        assert h.kv_end == min(geo.ceil_chunk(h.claim), kv_hit)
    # a hybrid never claims less than the dense rule would where a state image exists
    if d.claim in states or d.claim == 0:
        assert h.claim >= d.claim


def test_a_state_image_one_token_in_is_claimed():
    """The smallest joint boundary (position 1, on a one-token grid) is a real hit."""
    geo = Geometry(1, 1, 1, 1)
    plan = HitPolicy().hybrid(4, 8, [1], geo)
    assert plan == LoadPlan(kv_end=1, claim=1, joint=1)
    assert HitPolicy().hybrid(4, 8, [], geo) == LoadPlan(0, 0, 0)
