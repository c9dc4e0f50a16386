"""Helpers shared by the lmcache tests (plain module: conftest and tests import it)."""

from __future__ import annotations

import time
from typing import Any

from kvfault.faults.lmcache.server import INSTALL_HINT, lmcache_available
from kvfault.reference import Geometry
from kvfault.reference.interfaces import TierReply

HAVE_LMCACHE = lmcache_available()
SKIP_REASON = f"cpu_tests/lmcache: lmcache is not installed; {INSTALL_HINT}"
GEOMETRY = Geometry(block_size=16, chunk_size=256)
SAFETY_NET_S = 30.0  # generous real-time bound for replies that must come


def wait_reply(tier: Any, ticket: object, limit_s: float = SAFETY_NET_S) -> TierReply | None:
    """Poll until terminal; None when nothing came within ``limit_s`` (real time)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        reply = tier.poll(ticket)
        if reply is not None:
            return reply
        time.sleep(0.001)
    return None
