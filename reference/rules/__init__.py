"""The stack's rules, pure and swappable: keys, identity, anchors, hits, bounds, deadline.

``Rules`` bundles them; the stack asks its ``Rules`` and never which variant it runs.
"""

from kvfault.reference.rules.anchors import AnchorPolicy, grid_step
from kvfault.reference.rules.bounds import LoadBounds
from kvfault.reference.rules.deadline import LoadClock, RestoreDeadline
from kvfault.reference.rules.hits import HitPolicy, LoadPlan, joint_boundary
from kvfault.reference.rules.identity import EngineIdentity, lookup_socket_path
from kvfault.reference.rules.keys import (
    ChunkKeyMemo,
    block_hash_chain,
    chunk_keys,
    ids_fit_u32,
    media_cache_seed,
    state_image_key,
    tier_token_ids,
)
from kvfault.reference.rules.ruleset import Rules, side_chain_seed

__all__ = [
    "AnchorPolicy",
    "ChunkKeyMemo",
    "EngineIdentity",
    "HitPolicy",
    "LoadBounds",
    "LoadClock",
    "LoadPlan",
    "RestoreDeadline",
    "Rules",
    "block_hash_chain",
    "chunk_keys",
    "grid_step",
    "ids_fit_u32",
    "joint_boundary",
    "lookup_socket_path",
    "media_cache_seed",
    "side_chain_seed",
    "state_image_key",
    "tier_token_ids",
]
