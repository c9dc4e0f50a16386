"""The one call protocol between a server's processes and their host: a call is
``(name, args)``; its reply is ``(ok, value, events)``, the events being what the
callee recorded since its last reply. Every wait for a reply is bounded."""

from __future__ import annotations

from typing import Any

from kvfault.faults.atom.spec import RawEvent


def call(
    conn: Any, name: str, args: tuple, timeout_s: float, events: list[RawEvent], who: str
) -> Any:
    """Send the call, wait at most ``timeout_s`` for its reply, add the reply's events
    to ``events`` and return its value. ``TimeoutError`` when no reply came;
    ``RuntimeError`` (naming ``who`` and the call) when the callee failed."""
    conn.send((name, args))
    if not conn.poll(timeout_s):
        raise TimeoutError(f"{who} did not answer {name} within {timeout_s:g}s")
    ok, value, got = conn.recv()
    events.extend(got)
    if not ok:
        raise RuntimeError(f"{who} failed in {name}: {value}")
    return value
