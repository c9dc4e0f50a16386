"""The deterministic model (docs/design.md#fakes): KV and state are pure functions of
``(cache_seed, ids[:i+1])``; the output is a function of every page and the final
state, so any wrong restore changes it."""

from __future__ import annotations

import pytest

from kvfault.fakes import ConstantForwardTimer, DeterministicModel, SimKvPages
from kvfault.reference import Geometry, Request

GEO = Geometry(16, 64, 256, 256)
IDS = tuple(range(3000, 3000 + 200))  # 12 full blocks + 8 tokens


def req(ids=IDS, seed=-1, rid="r", out=4):
    return Request(rid, ids, cache_seed=seed, max_output_tokens=out)


def computed(model, r, cuts):
    """Compute ``r`` in steps ending at ``cuts``; returns the kv and its blocks."""
    kv = SimKvPages(64)
    blocks = list(range(40, 40 + 13))
    start = 0
    for end in cuts:
        model.compute(kv, r, blocks, start, end)
        start = end
    return kv, blocks


def test_kind_is_validated():
    with pytest.raises(ValueError):
        DeterministicModel("moe", GEO)


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
@pytest.mark.parametrize("cuts", [[200], [64, 200], [16, 32, 128, 192, 200], [100, 200]])
def test_computing_in_steps_equals_the_cold_run(kind, cuts):
    m = DeterministicModel(kind, GEO)
    r = req()
    kv, blocks = computed(m, r, cuts)
    assert [kv.read(b) for b in blocks] == m.cold_pages(r)
    assert m.output(kv, r, blocks) == m.cold_output(r)
    if kind == "hybrid":
        assert kv.read_state(r.req_id) == m.cold_state_at(r, 200)


def test_the_cold_state_is_taken_at_block_boundaries():
    m = DeterministicModel("hybrid", GEO)
    r = req()
    assert m.cold_state_at(r, 0) == m.initial_state(r)
    assert m.cold_state_at(r, 192) == m.cold_state_at(r, 200)
    assert m.cold_state_at(r, 176) != m.cold_state_at(r, 192)


def test_kv_and_state_depend_on_every_prior_token_and_the_seed():
    m = DeterministicModel("hybrid", GEO)
    base = m.cold_pages(req())
    changed = m.cold_pages(req((IDS[0] + 1,) + IDS[1:]))
    assert all(a != b for a, b in zip(base, changed, strict=True))
    late = m.cold_pages(req(IDS[:100] + (7,) + IDS[101:]))
    assert late[:6] == base[:6] and all(a != b for a, b in zip(base[6:], late[6:], strict=True))
    a, b = req(seed=1), req(seed=2)
    assert not set(m.cold_pages(a)) & set(m.cold_pages(b))
    assert m.cold_state_at(a, 64) != m.cold_state_at(b, 64)
    assert m.cold_output(a) != m.cold_output(b)


def test_a_wrong_restored_page_changes_the_output():
    m = DeterministicModel("dense", GEO)
    r = req()
    kv, blocks = computed(m, r, [200])
    kv.write(blocks[3], kv.read(blocks[3]) ^ 1)  # a stale page in the middle
    assert m.output(kv, r, blocks) != m.cold_output(r)
    # ...and a recompute past it builds on what HBM holds, so the error propagates
    m.compute(kv, r, blocks, 64, 200)
    assert [kv.read(b) for b in blocks][4:] != m.cold_pages(r)[4:]


def test_a_restore_from_another_picture_changes_the_output():
    m = DeterministicModel("dense", GEO)
    a, b = req(seed=11, rid="a"), req(seed=22, rid="b")
    kv, blocks = computed(m, a, [200])  # a's KV sits in the blocks b is handed
    m.compute(kv, b, blocks, 128, 200)  # b resumes at 128 on a's pages
    assert m.output(kv, b, blocks) != m.cold_output(b)


def test_a_state_restored_for_another_position_changes_the_output():
    m = DeterministicModel("hybrid", GEO)
    r = req()
    kv, blocks = computed(m, r, [200])
    kv.write_state(r.req_id, m.cold_state_at(r, 64))  # the image at 64, claimed at 128
    m.compute(kv, r, blocks, 128, 200)
    assert m.output(kv, r, blocks) != m.cold_output(r)
    kv.write_state(r.req_id, m.cold_state_at(r, 128))  # the right image
    m.compute(kv, r, blocks, 128, 200)
    assert m.output(kv, r, blocks) == m.cold_output(r)


def test_a_double_applied_last_token_changes_the_output():
    m = DeterministicModel("hybrid", GEO)
    r = req(IDS[:192])  # block-aligned: the state after 192 includes the last block
    kv, blocks = computed(m, r, [192])
    m.compute(kv, r, blocks, 176, 192)  # the last block applied again onto its own state
    assert m.output(kv, r, blocks) != m.cold_output(r)


def test_output_length_and_range():
    m = DeterministicModel("dense", GEO)
    out = m.cold_output(req(out=7))
    assert len(out) == 7 and all(0 <= t < 2**16 for t in out)
    assert m.cold_output(req(out=7)) == out


def test_forward_timer():
    t = ConstantForwardTimer(base_s=0.5, per_token_s=0.001)
    assert t.duration(0, 0) == 0.5
    assert t.duration(3, 1000) == pytest.approx(1.5)
