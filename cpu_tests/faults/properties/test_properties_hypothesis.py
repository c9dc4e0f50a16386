"""Property tests over random workloads (docs/design.md#properties, docs/design.md#interfaces): prompt lengths around chunk
boundaries, text or media, dense or hybrid, block and chunk sizes, in-process
("block") or MP ("chunk") state grid.

Each example runs pass 1 (stores), restarts the engine with the tier kept, and runs
pass 2: every prompt again with its own media, plus a twin of one prompt with the same
token ids and a different picture. It asserts

- correctness: every output equals ``DeterministicModel.cold_output``;
- key separation: ``kvfault.faults.properties.checks.keys`` finds nothing, the same media gives the
  same keys at every site, a text prompt keys on exactly its raw ids, and the twin
  hits nothing of the prompt it copies (not in the tier, not in HBM);
- loadable hits: the hybrid claim is the joint boundary, the dense claim gives back
  one token and floors to the chunk grid, nobody claims a whole prompt.

Profiles: ``HYPOTHESIS_PROFILE=dev|ci|nightly`` (cpu_tests/conftest.py).
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, note
from hypothesis import strategies as st

from kvfault.fakes import DeterministicModel, SimWorld
from kvfault.faults import RunResult
from kvfault.faults.properties import correctness, hybrid, keys
from kvfault.reference import Ev, Geometry, Request
from kvfault.reference.interfaces import LookupQuery
from kvfault.reference.rules import chunk_keys, media_cache_seed, tier_token_ids
from kvfault.reference.stack import EngineConfig

TEXT = -1


@st.composite
def configs(draw) -> EngineConfig:
    block = draw(st.sampled_from([16, 32, 64, 128]))
    chunk = block * draw(st.sampled_from([1, 2, 4]))
    interval = chunk * draw(st.integers(1, 3))
    budget = draw(st.sampled_from([chunk, 2 * chunk, 2048]))
    return EngineConfig(
        geometry=Geometry(block, chunk, max(budget, block), interval),
        model_kind=draw(st.sampled_from(["dense", "hybrid"])),
        state_grid=draw(st.sampled_from(["block", "chunk"])),
    )


def lengths_around_chunks(chunk: int, block: int) -> st.SearchStrategy[int]:
    """Mostly just below, on, or just above a chunk or block boundary."""
    on = st.builds(lambda k: k * chunk, st.integers(1, 4))
    near = st.builds(
        lambda k, d: k * chunk + d, st.integers(1, 4), st.sampled_from([-block, -1, 1, 2])
    )
    anywhere = st.integers(1, 4 * chunk + chunk - 1)
    return st.one_of(on, near, anywhere).filter(lambda n: n >= 1)


@st.composite
def workloads(draw):
    cfg = draw(configs())
    geo = cfg.geometry
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    longest = 5 * geo.chunk_size + geo.block_size
    base = tuple(rng.randrange(1000, 151_000) for _ in range(longest))
    n = draw(st.integers(1, 3))
    reqs = []
    for i in range(n):
        length = draw(lengths_around_chunks(geo.chunk_size, geo.block_size))
        shared = draw(st.booleans())  # a shared prefix, or a prompt of its own
        ids = (
            base[:length] if shared else tuple(rng.randrange(1000, 151_000) for _ in range(length))
        )
        media = (rng.randbytes(64),) if draw(st.booleans()) else ()
        seed = media_cache_seed(media)
        reqs.append(Request(f"chatcmpl-{i}", ids, cache_seed=seed, media=media))
    twin_of = draw(st.integers(0, n - 1))
    return cfg, reqs, twin_of, rng.randbytes(64)


class Recorder:
    """The scheduler's lookup client: passes through to the tier, keeps the queries."""

    def __init__(self, tier):
        self.tier = tier
        self.queries: list[LookupQuery] = []

    def lookup(self, query):
        self.queries.append(query)
        return self.tier.lookup(query)


def run_two_passes(cfg, reqs, twin_of, twin_picture):
    world = SimWorld()
    tier = world.memory_tier(cfg)
    rec = Recorder(tier)
    engine = world.engine(cfg, tier=tier, lookup=rec)
    outcomes = []
    pass1 = list(reqs)
    for r in pass1:
        engine.add_request(r)
    outcomes.append(engine.run())
    engine.restart()
    pass2 = [replace(r, req_id=f"{r.req_id}-again") for r in reqs]
    twin_media = (twin_picture,)
    twin = replace(
        reqs[twin_of],
        req_id="chatcmpl-twin",
        media=twin_media,
        cache_seed=media_cache_seed(twin_media),
    )
    for r in [*pass2, twin]:
        engine.add_request(r)
    outcomes.append(engine.run())
    requests = {r.req_id: r for r in [*pass1, *pass2, twin]}
    run = RunResult("hypothesis", 0, world.trace, cfg, requests, outcomes, [])
    return run, rec, pass1, pass2, twin


def key_firsts(run, req_id):
    return {
        e.data["site"]: e.data["first"]
        for e in run.trace.of(Ev.KEY)
        if e.req_id == req_id and e.data["first"] is not None
    }


@given(workloads())
def test_correctness_and_key_separation(drawn):
    cfg, reqs, twin_of, twin_picture = drawn
    note(f"config={cfg}")
    note(f"lengths={[r.prompt_len for r in reqs]} media={[bool(r.media) for r in reqs]}")
    run, rec, pass1, pass2, twin = run_two_passes(cfg, reqs, twin_of, twin_picture)
    geo = cfg.geometry
    for out in run.outcomes:
        assert out.stopped is None and not out.hung

    # correctness: every output is the cold run's
    model = DeterministicModel(cfg.model_kind, geo)
    outputs = {e.req_id: tuple(e.data["tokens"]) for e in run.trace.of(Ev.OUTPUT)}
    assert set(outputs) == set(run.requests)
    for rid, req in run.requests.items():
        assert outputs[rid] == model.cold_output(req), rid
    assert correctness(run) == []

    # key separation
    assert keys(run) == []
    queries = {q.tier_ids for q in rec.queries}
    for r in run.requests.values():
        ids = tier_token_ids(r)
        assert ids in queries
        assert all(0 <= t < 2**32 for t in ids)
        if r.cache_seed == TEXT:
            assert ids == r.prompt_token_ids
        else:
            assert ids[4:] == r.prompt_token_ids[4:]
            for i in range(min(4, r.prompt_len)):
                assert ids[i] ^ r.prompt_token_ids[i] == (r.cache_seed >> (16 * i)) & 0xFFFF
    for first, second in zip(pass1, pass2, strict=True):
        k1, k2 = key_firsts(run, first.req_id), key_firsts(run, second.req_id)
        # sites every send keys (load and save depend on what the send hits)
        assert {s: k1[s] for s in k1 if s in ("hbm", "lookup", "state")} == {
            s: k2[s] for s in k1 if s in ("hbm", "lookup", "state")
        }
        assert all(k1[s] == k2[s] for s in set(k1) & set(k2)), (k1, k2)
        if first.prompt_len >= geo.chunk_size:
            assert "lookup" in k1
        if first.cache_seed == TEXT:
            want = chunk_keys(first.prompt_token_ids, geo.chunk_size)
            assert k1.get("lookup") == (want[0].hex() if want else None)
    original = reqs[twin_of]
    k_orig, k_twin = key_firsts(run, original.req_id), key_firsts(run, twin.req_id)
    assert not set(k_orig.values()) & set(k_twin.values())
    lookups = {e.req_id: e.data for e in run.trace.of(Ev.LOOKUP)}
    assert lookups[twin.req_id]["kv_hit"] == 0
    assert lookups[twin.req_id]["hbm_hit"] == 0
    assert lookups[twin.req_id]["claim"] == 0

    # loadable hits
    assert hybrid(run) == []
    for d in lookups.values():
        assert d["claim"] < d["prompt_len"]
        if cfg.model_kind == "dense":
            assert d["claim"] == geo.floor_chunk(min(d["kv_hit"], d["prompt_len"] - 1))
    # pass 2 of a prompt with at least one full chunk below its end hits the tier
    for second in pass2:
        d = lookups[second.req_id]
        if geo.floor_chunk(second.prompt_len - 1) >= geo.chunk_size:
            assert d["kv_hit"] >= geo.chunk_size, (second.req_id, d)
            if cfg.model_kind == "dense":
                assert d["claim"] > 0
