"""The rules of the stack as swappable collaborators, fixed behaviour by default.

A planted regression (``kvfault.faults.regressions.legacy``) replaces one of these with its legacy
variant; the stack itself has no branch that asks which one it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kvfault.reference.rules.anchors import AnchorPolicy
from kvfault.reference.rules.bounds import LoadBounds
from kvfault.reference.rules.deadline import RestoreDeadline
from kvfault.reference.rules.hits import HitPolicy
from kvfault.reference.rules.identity import EngineIdentity
from kvfault.reference.rules.keys import tier_token_ids
from kvfault.reference.types import Request

_SIDE_CHAIN_TAG = 0x5349_4445  # names hybrid state images; ints only (no hash salt)


def side_chain_seed(req: Request) -> int:
    """Seed of the chain naming a request's state images: it starts from the request's
    ``cache_seed``, as the HBM prefix-cache chain does."""
    return hash((_SIDE_CHAIN_TAG, req.cache_seed))


@dataclass(frozen=True)
class Rules:
    tier_ids: Callable[[Request, int | None], tuple[int, ...]] = tier_token_ids
    side_chain_seed: Callable[[Request], int] = side_chain_seed
    anchors: AnchorPolicy = field(default_factory=AnchorPolicy)
    hits: HitPolicy = field(default_factory=HitPolicy)
    bounds: Callable[[float], LoadBounds] = LoadBounds
    deadline: Callable[[float], RestoreDeadline] = RestoreDeadline
    identity: EngineIdentity = field(default_factory=EngineIdentity)
