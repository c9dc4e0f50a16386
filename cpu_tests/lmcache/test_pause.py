"""``LMCacheServer.pause`` returns only once the server cannot answer (issue 34: the
``test_no_cascade`` flake, DID NOT RAISE LMCacheTierError).

Root cause: SIGSTOP sent to a process is taken by ONE of its threads; the others stop
only once that thread has run and started the group stop. A ``pause`` that returned
right after ``killpg`` let the server's zmq I/O thread and request threads answer a
request sent at once: with two busy loops beside the 2-core box, a tier set up right
after such a pause got its answers 4 times in 60 (never on a quiet box). ``pause`` now
waits for the kernel to report the stop complete, and says so when it does not come.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvfault.faults.lmcache.server import LMCacheServer, LMCacheServerError
from kvfault.reference.tiers.lmcache_client import server_answers

ROUNDS = 25  # the group stop takes 0-64 ms after killpg; each round is a fresh race


def test_pause_returns_only_once_every_server_thread_is_stopped(
    lmcache_server: LMCacheServer,
) -> None:
    for _ in range(ROUNDS):
        lmcache_server.pause()
        try:
            states = lmcache_server._thread_states()
            assert len(states) > 1 and set(states) == {"T"}, states
        finally:
            lmcache_server.resume()
    lmcache_server.pause()
    try:
        assert not server_answers(lmcache_server.url, 0.5)
    finally:
        lmcache_server.resume()
    assert server_answers(lmcache_server.url, 30.0)


def test_a_stop_that_does_not_land_is_reported_within_the_bound(
    lmcache_server: LMCacheServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a server whose threads never get scheduled would look like: the kernel never
    # reports the stop. pause must not wait for ever, nor return as if it had landed.
    monkeypatch.setattr(lmcache_server, "_group_stopped", lambda: False)
    try:
        with pytest.raises(LMCacheServerError) as info:
            lmcache_server.pause(settle_s=0.2)
    finally:
        lmcache_server.resume()
    message = str(info.value)
    assert f"lmcache server pid {lmcache_server.pid} was sent SIGSTOP" in message
    assert "had not stopped after 0.2s (thread states: T" in message, message


def test_a_server_that_died_is_paused_as_a_no_op(fresh_server: Any) -> None:
    fresh_server.kill()
    fresh_server.pause()  # nothing to stop; no error, no wait
    assert not fresh_server.alive()
