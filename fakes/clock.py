"""Virtual clock: simulated seconds that pass only when someone sleeps.

A 30 s kernel compile costs microseconds of wall time. Like trio's MockClock, the clock
is explicit and owned by the run; there is no global time.
"""

from __future__ import annotations


class VirtualClock:
    """Monotonic simulated time starting at ``start``; ``sleep`` advances it."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot sleep a negative time ({seconds})")
        self._now += seconds
