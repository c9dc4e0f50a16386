"""The real clock for the real-time tiers (LMCache server, GPU)."""

from __future__ import annotations

import time


class RealClock:
    """``time.monotonic`` seconds; ``sleep`` really sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)
