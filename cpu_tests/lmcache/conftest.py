"""Fixtures for the real LMCache tier: a session-scoped server, per-test tiers.

Every test under this directory is marked ``lmcache``. When lmcache (or the torch it
needs) is not installed, no test module here is imported: each is collected as one skip
raised from this file, so ``-rs`` prints ONE line naming the extra and the README's
install command, and a run of cpu_tests/lmcache alone exits 0. The server fixture always stops the server and removes
its /dev/shm segment (also when a test fails or the run is interrupted: the fixture
finalizer, then ``atexit``, then the child's parent-death signal).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
from lmc_util import GEOMETRY, HAVE_LMCACHE, SKIP_REASON
from tier_gate import TierGate

from kvfault.faults.lmcache import LMCacheServer
from kvfault.reference import Geometry

GATE = TierGate(__file__, "lmcache", None if HAVE_LMCACHE else SKIP_REASON)
pytest_pycollect_makemodule = GATE.pytest_pycollect_makemodule
pytest_collection_modifyitems = GATE.pytest_collection_modifyitems
pytest_sessionfinish = GATE.pytest_sessionfinish


@pytest.fixture(scope="session")
def lmcache_server() -> Iterator[LMCacheServer]:
    """One real server for the session (chunk 256, 0.25 GB L1)."""
    if not HAVE_LMCACHE:
        pytest.skip(SKIP_REASON)
    server = LMCacheServer(chunk_size=GEOMETRY.chunk_size, l1_size_gb=0.25)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_server() -> Iterator[LMCacheServer]:
    """A server of its own, for tests that kill, pause or fill it."""
    if not HAVE_LMCACHE:
        pytest.skip(SKIP_REASON)
    server = LMCacheServer(chunk_size=GEOMETRY.chunk_size, l1_size_gb=0.25)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        assert server.leftovers() == [], server.leftovers()


@pytest.fixture
def make_tier() -> Iterator[Callable[..., Any]]:
    """Build ``LMCacheTier``s against a URL; all are closed after the test."""
    from kvfault.reference.tiers import LMCacheTier

    tiers: list[LMCacheTier] = []

    def make(url: str, geometry: Geometry = GEOMETRY, **kw: Any) -> LMCacheTier:
        kw.setdefault("lookup_timeout_s", 10.0)
        tier = LMCacheTier(url, geometry, **kw)
        tiers.append(tier)
        return tier

    yield make
    for tier in tiers:
        tier.close()


@pytest.fixture
def lmcache_tier(lmcache_server: LMCacheServer, make_tier: Callable[..., Any]) -> Any:
    return make_tier(lmcache_server.url)
