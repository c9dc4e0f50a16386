"""Anchors and the chunk grid (docs/design.md#chunk-grid-anchors-and-hybrid-hits, fix 3): the rule's own functions, and the
scheduler cutting prefill at them. Its scenario (restart with the tier kept, MP grid)
is in test_scenarios.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvfault.reference import Ev, Geometry, Request
from kvfault.reference.rules import AnchorPolicy, grid_step

GEO = Geometry(16, 256, 2048, 1024)
ALIGNED = Geometry(128, 256, 2048, 256)  # the seed's chunk-aligned hybrid
policy = AnchorPolicy()


def test_grid_step():
    assert grid_step(GEO, "block") == 16
    assert grid_step(GEO, "chunk") == 256


@pytest.mark.parametrize(
    "prompt_len, resume, grid, expected",
    [
        # in-process tier: the prompt-end anchor at the last block boundary before the end,
        # but not past the last full chunk (the tier has no KV beyond it for a hit to use)
        (1000, 0, "block", [768]),
        (3000, 0, "block", [1024, 2048, 2816]),
        (3000, 1024, "block", [2048, 2816]),
        (1040, 0, "block", [1024]),  # 1024 tokens of full chunks: the last block before it
        (2048, 0, "block", [1024, 2032]),  # chunk-aligned: the KV covers the whole prompt
        # MP tier: the prompt-end anchor floored onto the chunk grid
        (1000, 0, "chunk", [768]),
        (3000, 0, "chunk", [1024, 2048, 2816]),
        (3000, 2048, "chunk", [2816]),
        (1024, 0, "chunk", [768]),  # a chunk-aligned prompt: 1008 floors to 768
        # ...unless the grid no longer lies past the resume point: the anchor is off the
        # grid then and not cut for (MP would drop its image)
        (1000, 768, "chunk", []),
        (3000, 2816, "chunk", []),
        (300, 0, "chunk", [256]),  # 288 floors to 256, still past the resume point
        (10, 0, "block", []),  # shorter than a block: nowhere to capture
    ],
)
def test_plan(prompt_len, resume, grid, expected):
    assert policy.plan(prompt_len, resume, GEO, grid) == expected


def test_plan_on_the_seeds_chunk_aligned_prompt():
    block = policy.plan(2048, 0, ALIGNED, "block")
    assert block == list(range(256, 1792 + 1, 256)) + [1920]
    chunk = policy.plan(2048, 0, ALIGNED, "chunk")
    assert chunk == list(range(256, 1792 + 1, 256))  # 1920 floored onto 1792


@given(
    block=st.sampled_from([16, 32, 64, 128]),
    chunks_per=st.sampled_from([1, 2, 4]),
    interval_chunks=st.integers(1, 4),
    prompt_len=st.integers(1, 5000),
    resume_frac=st.floats(0, 1),
    grid=st.sampled_from(["block", "chunk"]),
)
def test_plan_invariants(block, chunks_per, interval_chunks, prompt_len, resume_frac, grid):
    geo = Geometry(block, block * chunks_per, 4096, block * chunks_per * interval_chunks)
    resume = geo.floor_block(int(resume_frac * (prompt_len - 1)))
    anchors = policy.plan(prompt_len, resume, geo, grid)
    step = grid_step(geo, grid)
    assert anchors == sorted(set(anchors))
    for a in anchors:
        assert resume < a < prompt_len
        assert a % step == 0, f"anchor {a} is off the {grid} grid"
    # the last on-grid boundary before the prompt end and within its full chunks is an
    # anchor whenever it lies past the resume point (under MP too: that is the floored
    # prompt-end anchor); an image past the full chunks is never usable by a hit
    last = min(geo.floor_block(prompt_len - 1), geo.floor_chunk(prompt_len))
    last -= last % step
    assert all(a <= geo.floor_chunk(prompt_len) for a in anchors)
    if last > resume:
        assert anchors[-1] == last
    # mid-prefill anchors every interval
    for m in range(geo.state_checkpoint_interval, last, geo.state_checkpoint_interval):
        if m > resume and m % step == 0:
            assert m in anchors


@pytest.mark.parametrize(
    "start, end, anchors, expected",
    [
        (0, 2048, [768], 768),  # a step crossing an anchor ends at it
        (0, 2048, [768, 1024], 768),  # the first one it crosses
        (768, 1000, [768], 1000),  # starting at an anchor is not crossing it
        (0, 768, [768], 768),  # ending exactly at it needs no cut
        (0, 500, [768], 500),
        (800, 2048, [768, 1024], 1024),
        (0, 2048, [], 2048),
    ],
)
def test_cut(start, end, anchors, expected):
    assert policy.cut(start, end, anchors) == expected


def _prefill(rig, geo, grid, prompt_len, budget_steps=10):
    """Drive a hybrid request's prefill; returns the computed ranges and state saves."""
    r = rig(geo, "hybrid", grid)
    req = Request("chatcmpl-a", tuple(range(5, 5 + prompt_len)))
    r.sched.add(req)
    ranges = []
    for _ in range(budget_steps):
        meta = r.step()
        ranges += [(s, e) for _, s, e in meta.compute]
        r.sched.after_forward(meta)
        if r.sched.seq(req.req_id).computed == prompt_len:
            break
    saves = [e.data["position"] for e in r.trace.of(Ev.STATE_SAVE)]
    return ranges, saves


def test_prefill_is_cut_at_on_grid_anchors(rig):
    ranges, saves = _prefill(rig, GEO, "chunk", 1000)
    assert ranges == [(0, 768), (768, 1000)]
    assert saves == [768]
    ranges, saves = _prefill(rig, GEO, "chunk", 3000)
    assert ranges == [(0, 1024), (1024, 2048), (2048, 2816), (2816, 3000)]
    assert saves == [1024, 2048, 2816]


def test_prefill_is_cut_at_block_anchors_in_process(rig):
    ranges, saves = _prefill(rig, GEO, "block", 1000)
    assert ranges == [(0, 768), (768, 1000)]
    assert saves == [768]  # not 992: the tier keeps no KV past 768 for a hit to claim it
    ranges, saves = _prefill(rig, GEO, "block", 2048)
    assert ranges == [(0, 1024), (1024, 2032), (2032, 2048)]
    assert saves == [1024, 2032]


def test_every_state_image_requested_under_mp_lies_on_the_chunk_grid(rig):
    for n in (257, 1000, 2047, 2048, 2049, 4000):
        _, saves = _prefill(rig, GEO, "chunk", n)
        assert saves, n
        assert all(p % GEO.chunk_size == 0 for p in saves), (n, saves)


def test_dense_prefill_is_not_cut(rig):
    r = rig(GEO, "dense", "chunk")
    r.sched.add(Request("d", tuple(range(5, 1005))))
    meta = r.step()
    assert meta.compute == [("d", 0, 1000)]
