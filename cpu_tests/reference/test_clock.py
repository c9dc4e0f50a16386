"""The real clock: monotonic seconds, and a sleep that really waits (never a negative one)."""

from __future__ import annotations

from kvfault.reference.clock import RealClock


def test_sleep_waits_at_least_the_time_asked():
    clock = RealClock()
    t0 = clock.now()
    clock.sleep(0.02)
    assert clock.now() - t0 >= 0.02


def test_sleep_of_nothing_or_less_returns():
    clock = RealClock()
    clock.sleep(0)
    clock.sleep(-1.0)  # a deadline already past: no wait, no error
