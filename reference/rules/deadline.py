"""The worker's transfer deadline (fix 5 of the seed).

While the retrieve is pending, a load's clock runs from the retrieve's submission; once
its copy is enqueued, the deadline bounds only the copy, counted from the enqueue. A
restore whose fence raised keeps the submission clock. A load waiting for a restore
slot behind others is bounded by the scheduler, not here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoadClock:
    """The times the deadline rule reads for one load."""

    submitted_at: float
    retrieved_at: float | None = None
    enqueued_at: float | None = None
    fence_failed: bool = False


@dataclass(frozen=True)
class RestoreDeadline:
    deadline_s: float = 30.0

    def __post_init__(self) -> None:
        if self.deadline_s <= 0:
            raise ValueError(f"transfer deadline must be positive, got {self.deadline_s}")

    def clock_start(self, clock: LoadClock) -> float | None:
        """When the running deadline started, or None when none runs."""
        if clock.retrieved_at is None:
            return clock.submitted_at
        if clock.enqueued_at is not None:
            return clock.enqueued_at
        if clock.fence_failed:
            return clock.submitted_at
        return None
