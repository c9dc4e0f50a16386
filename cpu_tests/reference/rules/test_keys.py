"""Keys (docs/design.md#keys): tier ids, chunk keys, seeded hash chains, media seeds.

The rule's own functions here; its scenario (two pictures with the same text) in
test_scenarios.py and over random workloads in test_properties_hypothesis.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.reference.rules import (
    ChunkKeyMemo,
    block_hash_chain,
    chunk_keys,
    ids_fit_u32,
    media_cache_seed,
    side_chain_seed,
    state_image_key,
    tier_token_ids,
)
from kvfault.reference.types import TEXT_CACHE_SEED, Request

ROOT = Path(__file__).resolve().parents[3]
U32 = 2**32

PROMPT = tuple(range(1000, 1000 + 600))
SEED_A = 0x0123_4567_89AB_CDEF
SEED_B = 0xFEDC_BA98_7654_3210


def req(ids=PROMPT, seed=TEXT_CACHE_SEED, rid="r") -> Request:
    return Request(rid, tuple(ids), cache_seed=seed)


# -- tier_token_ids ------------------------------------------------------------------


def test_text_keys_on_exactly_the_prompt_ids():
    assert tier_token_ids(req()) == PROMPT
    assert tier_token_ids(req(), 300) == PROMPT[:300]
    assert tier_token_ids(req(), 0) == ()


def test_media_seed_folds_into_the_first_four_ids_only():
    ids = tier_token_ids(req(seed=SEED_A))
    assert len(ids) == len(PROMPT)
    assert ids[4:] == PROMPT[4:]
    # every one of the first four ids changes, one 16-bit quarter of the seed each
    for i in range(4):
        assert ids[i] ^ PROMPT[i] == (SEED_A >> (16 * i)) & 0xFFFF
        assert ids[i] != PROMPT[i]


@pytest.mark.parametrize("quarter", range(4))
def test_every_quarter_of_the_seed_reaches_the_ids(quarter):
    """Two seeds that differ only in one 16-bit quarter still give different ids."""
    other = SEED_A ^ (0x8001 << (16 * quarter))
    a, b = tier_token_ids(req(seed=SEED_A)), tier_token_ids(req(seed=other))
    assert a != b
    assert [i for i in range(len(a)) if a[i] != b[i]] == [quarter]


def test_different_media_different_ids_same_media_same_ids():
    a1 = tier_token_ids(req(seed=SEED_A, rid="a1"))
    a2 = tier_token_ids(req(seed=SEED_A, rid="a2"))
    b = tier_token_ids(req(seed=SEED_B))
    assert a1 == a2
    assert a1 != b
    assert a1 != PROMPT and b != PROMPT


def test_ids_stay_in_u32_even_at_the_edges():
    edge = (U32 - 1, 0, U32 - 1, 0x8000_0000) + PROMPT[4:]
    for seed in (SEED_A, SEED_B, 2**64 - 1, 1, -2, -(2**63)):
        ids = tier_token_ids(req(edge, seed))
        assert all(0 <= t < U32 for t in ids), seed
    # a negative seed (not -1) is a 64-bit seed too, and it does change the ids
    assert tier_token_ids(req(edge, -2)) != edge


def test_prompt_end_shorter_than_the_fold():
    for end in range(0, 5):
        ids = tier_token_ids(req(seed=SEED_A), end)
        assert len(ids) == end
        assert ids == tier_token_ids(req(seed=SEED_A))[:end]
    short = req((7, 8), SEED_A)
    assert tier_token_ids(short) == (7 ^ (SEED_A & 0xFFFF), 8 ^ ((SEED_A >> 16) & 0xFFFF))


def test_prefix_of_tier_ids_is_tier_ids_of_prefix():
    """Every key site cuts the same ids: a save of [0, end) keys like a lookup of it."""
    r = req(seed=SEED_B)
    full = tier_token_ids(r)
    for end in (1, 3, 4, 5, 256, 599):
        assert tier_token_ids(r, end) == full[:end]


# -- chunk keys ----------------------------------------------------------------------


def test_chunk_keys_only_full_chunks():
    assert chunk_keys(PROMPT[:255], 256) == []
    assert len(chunk_keys(PROMPT[:256], 256)) == 1
    assert len(chunk_keys(PROMPT, 256)) == 2  # 600 tokens: the 88-token tail is not keyed
    assert chunk_keys(PROMPT, 256) == chunk_keys(PROMPT[:512], 256)


def test_chunk_keys_are_a_prefix_chain():
    base = chunk_keys(PROMPT, 128)
    changed = list(PROMPT)
    changed[5] += 1  # in chunk 0: every later key changes too
    assert all(x != y for x, y in zip(base, chunk_keys(changed, 128), strict=True))
    changed = list(PROMPT)
    changed[300] += 1  # in chunk 2: keys 0 and 1 stay
    other = chunk_keys(changed, 128)
    assert other[:2] == base[:2]
    assert all(x != y for x, y in zip(base[2:], other[2:], strict=True))
    assert len(set(base)) == len(base)
    assert all(len(k) == 16 for k in base)


def test_chunk_keys_reject_ids_outside_u32():
    with pytest.raises(OverflowError):
        chunk_keys((U32,) * 16, 16)
    with pytest.raises(OverflowError):
        chunk_keys((-1,) * 16, 16)


def test_remembered_keys_are_those_of_the_prefix():
    memo = ChunkKeyMemo(128)
    bad_tail = PROMPT[:300] + (U32,) + PROMPT[301:]  # chunk 2 unkeyable, 0 and 1 fine
    for ids in (PROMPT, bad_tail, list(PROMPT)):
        for end in (None, 0, 127, 128, 300, 384, 599, 600, 10_000, -5):
            want_ids = ids if end is None else ids[: max(end, 0)]
            try:
                want = chunk_keys(want_ids, 128)
            except OverflowError:
                with pytest.raises(OverflowError):
                    memo.keys(ids, end)
            else:
                assert memo.keys(ids, end) == want, (end, type(ids))
                assert memo.keys(ids, end) == want  # asked again: remembered
            assert memo.fit_u32(ids, end) == ids_fit_u32(want_ids), (end, type(ids))


def test_remembered_keys_follow_the_tuple_not_its_address():
    memo = ChunkKeyMemo(16, kept=2)
    tuples = [tuple(range(i, i + 32)) for i in range(5)]
    for t in tuples:  # more than kept: the oldest entries go
        assert memo.keys(t) == chunk_keys(t, 16)
    assert len(memo._seen) == 2
    for t in tuples:
        assert memo.keys(t) == chunk_keys(t, 16)


def test_ids_fit_u32():
    assert ids_fit_u32(()) and ids_fit_u32((0, U32 - 1))
    assert not ids_fit_u32((U32,)) and not ids_fit_u32((-1, 5))
    assert ids_fit_u32([0, 1, 2])


def test_media_keys_differ_at_every_chunk():
    ka = chunk_keys(tier_token_ids(req(seed=SEED_A)), 256)
    kb = chunk_keys(tier_token_ids(req(seed=SEED_B)), 256)
    kt = chunk_keys(tier_token_ids(req()), 256)
    assert not set(ka) & set(kb)
    assert not set(ka) & set(kt)
    assert kt == chunk_keys(PROMPT, 256)


# -- seeded hash chains --------------------------------------------------------------


def test_block_hash_chain_starts_from_its_seed():
    text = block_hash_chain(PROMPT, 16, TEXT_CACHE_SEED)
    a = block_hash_chain(PROMPT, 16, SEED_A)
    b = block_hash_chain(PROMPT, 16, SEED_B)
    assert len(text) == len(a) == len(b) == 600 // 16
    # a different seed changes every link, not only the first
    assert all(x != y for x, y in zip(a, b, strict=True))
    assert all(x != y for x, y in zip(a, text, strict=True))
    assert a == block_hash_chain(PROMPT, 16, SEED_A)


def test_block_hash_chain_upto_and_partial_blocks():
    full = block_hash_chain(PROMPT, 16, SEED_A)
    assert block_hash_chain(PROMPT, 16, SEED_A, upto=100) == full[:6]
    assert block_hash_chain(PROMPT[:100], 16, SEED_A) == full[:6]
    assert block_hash_chain(PROMPT, 16, SEED_A, upto=15) == []


def test_state_image_key_names_the_block_boundary():
    chain = block_hash_chain(PROMPT, 16, SEED_A)
    assert state_image_key(chain, 16, 16) == chain[0]
    assert state_image_key(chain, 256, 16) == chain[15]


def test_side_chain_seed_starts_from_cache_seed():
    assert side_chain_seed(req(seed=SEED_A)) != side_chain_seed(req(seed=SEED_B))
    assert side_chain_seed(req(seed=SEED_A)) != side_chain_seed(req())
    assert side_chain_seed(req(seed=SEED_A, rid="x")) == side_chain_seed(req(seed=SEED_A))
    # the state-image names of two pictures share nothing
    sa = block_hash_chain(PROMPT, 16, side_chain_seed(req(seed=SEED_A)))
    sb = block_hash_chain(PROMPT, 16, side_chain_seed(req(seed=SEED_B)))
    assert not set(sa) & set(sb)


# -- media seeds ---------------------------------------------------------------------


def test_media_cache_seed():
    assert media_cache_seed(()) == TEXT_CACHE_SEED
    s = media_cache_seed((b"picture-a",))
    assert 0 <= s < 2**64
    assert s == media_cache_seed((b"picture-a",))
    assert s != media_cache_seed((b"picture-b",))
    # item boundaries are part of the digest
    assert media_cache_seed((b"ab", b"c")) != media_cache_seed((b"a", b"bc"))
    assert media_cache_seed((b"a", b"b")) != media_cache_seed((b"b", b"a"))


_HASHSEED_PROBE = """
from kvfault.reference.rules import block_hash_chain, chunk_keys, tier_token_ids
from kvfault.reference.rules import side_chain_seed
from kvfault.reference import Request
r = Request("chatcmpl-x", tuple(range(3, 515)), cache_seed=12345678901234)
print(block_hash_chain(r.prompt_token_ids, 16, r.cache_seed)[-1],
      block_hash_chain(r.prompt_token_ids, 16, side_chain_seed(r))[-1],
      chunk_keys(tier_token_ids(r), 256)[-1].hex())
"""


def test_keys_do_not_depend_on_pythonhashseed():
    outs = set()
    for hashseed in ("0", "1"):
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        proc = subprocess.run(
            [sys.executable, "-c", _HASHSEED_PROBE],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        outs.add(proc.stdout)
    assert len(outs) == 1, outs


def test_media_cache_seed_is_pinned():
    """A tier keeps what it stored across engine restarts and upgrades, keyed through
    this seed: the digest of a given picture must never change (64-bit, blake2b of each
    item's little-endian length and bytes)."""
    assert media_cache_seed((b"picture-1",)) == 15688227094434923224
    # the lengths are hashed too: the same bytes split differently are other media
    assert media_cache_seed((b"ab", b"c")) == 652078932630809789
    assert media_cache_seed((b"a", b"bc")) == 16576754464128796102
