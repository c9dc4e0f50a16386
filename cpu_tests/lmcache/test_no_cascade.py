"""No cascade (issue 20): whatever one case does to its server or its client, the next
case starts from a server that answers and a client that moves messages.

The root cause, shown here with real processes: lmcache 0.5.6's client closes its
monitor's reader before its socket, and libzmq sends a monitor event from the
context's I/O thread with a blocking send. A client that gave up on a paused server
still holds its unsent request (zmq lingers), so when that server dies the event has
no reader and the I/O thread blocks for good: with lmcache's default, process-wide
context, every later client of the process timed out, whatever server it talked to
(the 30 s tier setups of the issue). ``kvfault.reference.tiers.lmcache_client.close_client``
stops the monitor first. ``LMCacheSession.check`` is the second line of defence: it
replaces a client context or a server that stopped answering before the next run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from lmc_util import GEOMETRY

from kvfault.faults.campaign.execute import JudgedRun, run_case
from kvfault.faults.lmcache.executor import LMCacheExecutor
from kvfault.faults.lmcache.server import LMCacheServer
from kvfault.faults.lmcache.session import LMCacheSession
from kvfault.faults.lmcache.wire_faults import WireServerFault
from kvfault.reference.tiers.lmcache import LMCacheTier, LMCacheTierError

HEALTHY = "real_restart_tier_kept"


@pytest.fixture(scope="module")
def session() -> Iterator[LMCacheSession]:
    """One session for the module: each test breaks it its own way, and the check
    before the test's next run must repair it (that is what is under test)."""
    with LMCacheSession() as s:
        yield s
    assert s.leftovers() == []


def _healthy_case(session: LMCacheSession, seed: int = 0) -> JudgedRun:
    executor = LMCacheExecutor(session)
    try:
        res = run_case(HEALTHY, seed, executor=executor)
    finally:
        executor.case_done()
    assert res.ok and res.stop is None, (res.violations, res.stop)
    return res


def _give_up_on_paused_then_kill(server: LMCacheServer, **tier_kw: object) -> None:
    """The fault: the server stops answering (SIGSTOP, as a box out of memory stalls
    it), a tier gives up on it, then the server dies (SIGKILL, as the OOM killer ends
    it) while that tier's request is still queued in its closed client. ``pause``
    returns once every server thread has stopped: before, a request sent at once could
    still be answered and this raised nothing (test_pause.py)."""
    server.pause()
    with pytest.raises(LMCacheTierError, match="no answer to get_chunk_size|within"):
        LMCacheTier(server.url, GEOMETRY, connect_timeout_s=0.5, **tier_kw)
    server.kill()


def test_a_tier_closed_on_a_server_that_then_dies_does_not_wedge_later_tiers(
    fresh_server: LMCacheServer, lmcache_server: LMCacheServer
) -> None:
    # lmcache's default context, shared by every client of this process.
    _give_up_on_paused_then_kill(fresh_server)
    tier = LMCacheTier(lmcache_server.url, GEOMETRY, connect_timeout_s=5.0)
    try:
        assert tier.close_problem == ""
    finally:
        tier.close()
    assert tier.close_problem == ""


def test_the_cases_after_a_paused_then_killed_server_pass(session: LMCacheSession) -> None:
    """The cascade of the issue, deterministically: a fault leaves the client process in
    the bad state, then healthy cases must pass (each timed out at its tier's setup)."""
    assert session.server is not None
    starts = session.starts
    _give_up_on_paused_then_kill(session.server)
    _healthy_case(session, 0)
    _healthy_case(session, 1)
    assert session.starts == starts + 1  # the dead server was replaced once


def test_a_wedged_client_context_is_replaced_before_the_next_run(
    session: LMCacheSession,
) -> None:
    # What lmcache's own close order leaves: a socket of the session's context whose
    # monitor reader is gone. Its next events block the context's I/O thread for good.
    # A peer that keeps refusing (nothing listens; retries every millisecond) makes
    # those events at once, where a dying server makes them when the kernel says so.
    import socket

    import zmq

    ctx = session.client_context
    assert ctx is not None and ctx.io_alive(2.0)
    resets, retired = len(session.client_resets), len(session.retired)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sock = ctx.zmq.socket(zmq.DEALER)
    sock.setsockopt(zmq.RECONNECT_IVL, 1)
    sock.get_monitor_socket().close(linger=0)  # lmcache's order: monitor reader first
    sock.connect(f"tcp://127.0.0.1:{port}")
    deadline = time.monotonic() + 15
    while ctx.io_alive(0.5) and time.monotonic() < deadline:
        pass
    assert not ctx.io_alive(1.0)  # wedged: what the check must catch
    res = _healthy_case(session)
    (line,) = session.client_resets[resets:]
    assert "zmq context moved no loopback message" in line
    assert res.notes["client_reset"] == [line]
    assert session.client_context is not ctx and ctx.abandoned
    assert len(session.retired) == retired  # the server was never the problem


def test_a_server_that_stopped_answering_is_replaced_before_the_next_run(
    session: LMCacheSession,
) -> None:
    stuck = session.server
    assert stuck is not None
    resets, retired = len(session.client_resets), len(session.retired)
    stuck.pause()  # alive, answering nothing
    res = _healthy_case(session)
    assert not stuck.alive() and stuck.leftovers() == []
    (line,) = session.retired[retired:]
    assert f"lmcache server pid {stuck.pid} at {stuck.url} is alive (state T)" in line
    assert "get_chunk_size" in line and "server log tail:" in line
    assert res.notes["server_retired"] == [line]
    assert len(session.client_resets) == resets  # the client was never the problem


def test_a_run_that_cannot_set_up_its_tier_ends_naming_the_request_and_the_next_passes(
    session: LMCacheSession,
) -> None:
    # The server stops (for good, as far as the run can tell) at the tier's first request.
    def pause_at_setup():  # type: ignore[no-untyped-def]
        return [WireServerFault("pause", op="get_chunk_size", index=0, pause_deadlines=100)]

    executor = LMCacheExecutor(session)
    with pytest.raises(LMCacheTierError) as info:
        run_case(HEALTHY, 0, injectors=pause_at_setup, executor=executor)
    executor.case_done()  # the proxy's end resumes the server
    message = str(info.value)
    assert "no answer to get_chunk_size" in message
    # The setup bound: rpc_bound_s, stretched by the run's pace on a loaded box.
    bound = re.search(r"within ([0-9.]+)s \(tier setup\)", message)
    assert bound is not None and float(bound.group(1)) >= session.rpc_bound_s, message
    _healthy_case(session)


def test_the_lmcache_internals_the_safe_close_needs_are_there() -> None:
    from kvfault.reference.tiers.lmcache_client import check_internals

    assert check_internals() == []
