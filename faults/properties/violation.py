"""What a property reports: one violation with its evidence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from faults.runs import RunResult


@dataclass(frozen=True)
class Violation:
    prop: str
    message: str
    op: str | None = None
    t: float | None = None

    def __str__(self) -> str:
        where = f" [{self.op}]" if self.op else ""
        when = f" at t={self.t:.3f}s" if self.t is not None else ""
        return f"{self.prop}: {self.message}{where}{when}"


Checker = Callable[[RunResult], list[Violation]]
