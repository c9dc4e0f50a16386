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

from kvfault.faults.lmcache import LMCacheServer
from kvfault.reference import Geometry


class _SkippedModule(pytest.Module):
    """A test module that is not imported: it needs lmcache."""

    def collect(self):
        pytest.skip(SKIP_REASON)


def pytest_pycollect_makemodule(module_path, parent):
    if not HAVE_LMCACHE:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # cpu_tests/lmcache run alone without lmcache: every module skipped is a clean
    # result, not "no tests collected".
    if not HAVE_LMCACHE and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.lmcache)


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
