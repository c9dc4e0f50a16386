"""Workload generators (docs/design.md#fakes): one seed makes everything; realistic request ids;
pictures with the same placeholder ids; chunk-aligned prompts; bursts."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvfault.fakes.workloads import (
    IMAGE_PLACEHOLDER_ID,
    VOCAB_BASE,
    VOCAB_SIZE,
    Workloads,
    fit,
    picks,
    resend,
    token_id,
    tokenize,
)
from kvfault.reference.rules import media_cache_seed
from kvfault.reference.types import TEXT_CACHE_SEED

ROOT = Path(__file__).resolve().parents[2]
UUID_ID = re.compile(
    r"^chatcmpl-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)


def test_same_seed_same_workload_other_seed_other_workload():
    a = Workloads(5).gsm8k_fewshot(4)
    b = Workloads(5).gsm8k_fewshot(4)
    c = Workloads(6).gsm8k_fewshot(4)
    assert a.requests == b.requests and a.seed == 5
    assert [r.prompt_token_ids for r in a.requests] != [r.prompt_token_ids for r in c.requests]
    assert {r.req_id for r in a.requests}.isdisjoint(r.req_id for r in c.requests)


def test_request_ids_look_like_real_engines():
    w = Workloads(1)
    ids = [w.request_id() for _ in range(50)]
    assert all(UUID_ID.match(i) for i in ids), ids[:3]
    assert len(set(ids)) == 50


def test_token_ids_are_stable_and_in_the_vocabulary():
    assert token_id("apple") == token_id("apple")
    assert token_id("apple") != token_id("pear")
    ids = tokenize("the quick brown fox")
    assert len(ids) == 4
    w = Workloads(2)
    for r in w.gsm8k_fewshot(3).requests:
        assert all(VOCAB_BASE <= t < VOCAB_BASE + VOCAB_SIZE for t in r.prompt_token_ids)
        assert all(0 <= t < 2**32 for t in r.prompt_token_ids)


def test_fit_pads_or_cuts_to_length():
    filler = lambda n: (9,) * n  # noqa: E731
    assert fit((1, 2, 3), 5, filler) == (1, 2, 3, 9, 9)
    assert fit((1, 2, 3), 2, filler) == (1, 2)
    assert fit((1, 2, 3), 3, filler) == (1, 2, 3)


def test_gsm8k_prompts_share_a_long_prefix():
    wl = Workloads(3).gsm8k_fewshot(5, prefix_tokens=1024, question_tokens=(40, 400))
    assert wl.name == "gsm8k_fewshot" and len(wl.requests) == 5
    prefixes = {r.prompt_token_ids[:1024] for r in wl.requests}
    assert len(prefixes) == 1
    for r in wl.requests:
        assert 1024 + 40 <= r.prompt_len < 1024 + 400
        assert r.cache_seed == TEXT_CACHE_SEED and r.media == ()
    assert len({r.prompt_token_ids for r in wl.requests}) == 5


def test_pictures_with_the_same_text_have_identical_ids_and_different_seeds():
    wl = Workloads(4).multimodal_same_text(3, text_tokens=300, image_tokens=576)
    a, b, c = wl.requests
    assert a.prompt_token_ids == b.prompt_token_ids == c.prompt_token_ids
    assert a.prompt_len == 876
    assert a.prompt_token_ids.count(IMAGE_PLACEHOLDER_ID) == 576
    assert len({a.media, b.media, c.media}) == 3
    for r in wl.requests:
        assert r.cache_seed == media_cache_seed(r.media) != TEXT_CACHE_SEED
    assert len({a.cache_seed, b.cache_seed, c.cache_seed}) == 3


@pytest.mark.parametrize("length", [256, 2048, 4096])
def test_chunk_aligned_prompt(length):
    (r,) = Workloads(5).chunk_aligned(length).requests
    assert r.prompt_len == length


def test_burst_is_distinct_prompts_arriving_together():
    wl = Workloads(6).burst(64, 1024, arrival_time=12.5)
    assert len(wl.requests) == 64
    assert len({r.prompt_token_ids for r in wl.requests}) == 64
    assert len({r.req_id for r in wl.requests}) == 64
    assert all(r.prompt_len == 1024 and r.arrival_time == 12.5 for r in wl.requests)


@pytest.mark.parametrize("k", [0, 1, 623, 4095, 4096, 4097, 30_000])
@pytest.mark.parametrize("seed", [0, 5])
def test_picks_draw_what_random_choices_draws_and_leave_the_same_state(seed, k):
    pytest.importorskip("numpy")  # without numpy, picks is random.choices itself
    population = list(range(1000, 1000 + 1999 + seed))
    plain, fast = random.Random(seed), random.Random(seed)
    plain.random(), fast.random()  # start mid-stream, not at a fresh state
    assert picks(fast, population, k) == tuple(plain.choices(population, k=k))
    assert fast.getstate() == plain.getstate()


def test_a_burst_draws_what_a_prompt_per_request_draws():
    burst = Workloads(3).burst(5, 300, arrival_time=2.0).requests
    one_by_one = Workloads(3)
    for req in burst:
        assert req.req_id == one_by_one.request_id()
        assert req.prompt_token_ids == one_by_one.prompt(300)
        assert req.arrival_time == 2.0
    # Both leave the generators where they are: the next draws agree too.
    w = Workloads(3)
    w.burst(5, 300)
    assert w.words(10) == one_by_one.words(10)


def test_resend_keeps_prompt_and_media():
    (a,) = Workloads(7).multimodal_same_text(1).requests
    b = resend(a, "new-id", 3.0)
    assert (b.req_id, b.arrival_time) == ("new-id", 3.0)
    assert (b.prompt_token_ids, b.media, b.cache_seed) == (
        a.prompt_token_ids,
        a.media,
        a.cache_seed,
    )


_PROBE = """
import hashlib
from kvfault.fakes import Workloads
w = Workloads(9)
parts = [w.gsm8k_fewshot(3), w.multimodal_same_text(2), w.burst(4, 300)]
h = hashlib.sha256(repr([p.requests for p in parts]).encode()).hexdigest()
print(h)
"""


def test_workloads_do_not_depend_on_pythonhashseed():
    outs = set()
    for hashseed in ("0", "4242"):
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            cwd=ROOT,
            env=dict(os.environ, PYTHONHASHSEED=hashseed),
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        outs.add(proc.stdout.strip())
    assert len(outs) == 1


def test_a_workload_drawn_again_is_the_same_and_leaves_the_generators_where_drawing_would():
    """A re-run draws from remembered workloads; what it is handed, and every draw after
    it, equals a fresh draw."""
    from kvfault.fakes import workloads as wl

    def story(w: Workloads):
        return w.burst(3, 64), w.gsm8k_fewshot(2, prefix_tokens=64), w.request_id(), w.words(5)

    wl._DRAWN.clear()
    first = story(Workloads(11))
    assert len(wl._DRAWN) == 2
    again = story(Workloads(11))
    assert len(wl._DRAWN) == 2  # served from memory
    assert again == first
    assert again[0].requests is not first[0].requests  # a list of its own
    wl._DRAWN.clear()
    assert story(Workloads(11)) == first  # and equal to drawing it afresh


def test_chunk_aligned_is_one_prompt_of_whole_chunks():
    (req,) = Workloads(3).chunk_aligned().requests
    assert req.prompt_len == 2048  # eight 256-token chunks, the seed's default
    (short,) = Workloads(3).chunk_aligned(512).requests
    assert short.prompt_len == 512
