"""Loadable hits: how much of a tier hit a request may claim (fix 4 of the seed).

A full-prompt hit must leave at least one token to compute, since the engine needs the
last token's logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kvfault.reference.types import Geometry


@dataclass(frozen=True)
class LoadPlan:
    kv_end: int  # KV transferred from the tier: [0, kv_end)
    claim: int  # where the request resumes computing
    joint: int = 0  # hybrids: the state image position restored


def joint_boundary(kv_hit: int, prompt_len: int, state_positions: Sequence[int]) -> int:
    """The last state image at or below the KV hit and below the prompt end (0: none)."""
    bound = min(kv_hit, prompt_len - 1)  # positions are ints: one comparison each
    return max([p for p in state_positions if p <= bound], default=0)


@dataclass(frozen=True)
class HitPolicy:
    """Dense: give back one token, then floor to the chunk grid. Hybrid: claim the joint
    boundary ``J``, which already leaves a token to compute; the KV leg transfers the
    whole chunk covering ``J``."""

    def dense(self, kv_hit: int, prompt_len: int, geometry: Geometry) -> LoadPlan:
        hit = min(kv_hit, prompt_len - 1)
        hit = geometry.floor_chunk(hit)
        return LoadPlan(kv_end=hit, claim=hit)

    def hybrid(
        self,
        kv_hit: int,
        prompt_len: int,
        state_positions: Sequence[int],
        geometry: Geometry,
    ) -> LoadPlan:
        joint = joint_boundary(kv_hit, prompt_len, state_positions)
        if joint == 0:
            return LoadPlan(0, 0, 0)
        return LoadPlan(kv_end=min(geometry.ceil_chunk(joint), kv_hit), claim=joint, joint=joint)
