"""The ``lmcache`` tier's declaration (entry point ``kvfault.tiers: lmcache``): the
reference stack with a real lmcache server on 127.0.0.1, in real time, under wire
faults. Reading it imports nothing of lmcache or torch."""

from __future__ import annotations

from kvfault.faults.tiers.tier import Row, Tier

NAME = "lmcache"

# The shared scenarios this tier runs (``kvfault.faults.scenarios.SCENARIOS``): the stories
# small enough for a real server in real time as they are, and the real-tier sizes
# (``kvfault.faults.scenarios.real_sized``) of three that are not.
SCENARIOS_HERE = (
    "two_servers",
    "two_images",
    "restart_tier_kept",
    "chunk_aligned_hybrid",
    "real_restart_tier_kept",
    "real_restart_burst",
    "real_lost_completion_burst",
)

# The planted regressions that show on this tier, each on the real-tier size of its
# scenario. Not here: hybrid_last_chunk (the MP server keeps state images only on the
# chunk grid, so a chunk-aligned prompt's joint boundary is already a chunk boundary
# and the legacy give-back loses nothing: both load 1792 of 2048 tokens);
# anchor_past_full_chunks (not tried on the real server: whether it keeps an image off
# its chunk grid for the block-grid story is the server's business);
# restart_numbering_in_hash_order (its scenario has no real-tier size: 64 loads behind
# 21 s steps are over 25 minutes of real time, and set order is the Python process's,
# not the tier's); engine_id_without_rank and dense_whole_prompt_hit (not tried).
REGRESSION_SCENARIOS = {
    "media_keys": "two_images",
    "side_chain_seed": "two_images",
    "engine_id_without_port": "two_servers",
    "anchors_off_mp_grid": "restart_tier_kept",
    "restore_deadline_from_submission": "real_restart_burst",
    "load_bound_without_restart": "real_restart_burst",
    "restart_all_over_fix": "real_lost_completion_burst",
}


def rows() -> list[Row]:
    """The shared scenarios it runs (``SCENARIOS_HERE``), its wire faults, and the
    planted regressions that show here (each on its real-tier size)."""
    from kvfault.faults.lmcache.wire_faults import WIRE_FAULTS
    from kvfault.faults.regressions.legacy import REGRESSIONS
    from kvfault.faults.scenarios import SCENARIOS

    out = [Row("scenario", n, SCENARIOS[n].description, n) for n in SCENARIOS_HERE]
    out += [Row("fault", w.name, w.description, w.scenario) for w in WIRE_FAULTS.values()]
    out += [
        Row("regression", r.name, r.description, REGRESSION_SCENARIOS[r.name])
        for r in REGRESSIONS.values()
        if r.name in REGRESSION_SCENARIOS
    ]
    return out


TIER = Tier(
    name=NAME,
    description="a real lmcache server on 127.0.0.1, in real time, with wire faults "
    "(needs the lmcache extra: pip install -c constraints/ci.txt '.[lmcache]')",
    opener="kvfault.faults.lmcache.executor:lmcache_executor",
    catalog="kvfault.faults.lmcache.tier:rows",
    faults="kvfault.faults.lmcache.wire_faults:WIRE_FAULTS",
    rank=10,
)
