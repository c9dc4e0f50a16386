"""What a property reports: one violation with its evidence, as data. Renderers (the
table, ``summary.json``, JUnit, ``kvfault repro``) format it; ``str(v)`` is the one
line they print."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kvfault.faults.runs import RunResult


@dataclass(frozen=True)
class Violation:
    """Property ``prop`` failed: ``message`` says how; the evidence is the operation it
    names (``op``) and the trace time it showed (``t``, seconds), when there is one."""

    prop: str
    message: str
    op: str | None = None
    t: float | None = None

    def __str__(self) -> str:
        where = f" [{self.op}]" if self.op else ""
        when = f" at t={self.t:.3f}s" if self.t is not None else ""
        return f"{self.prop}: {self.message}{where}{when}"

    def as_json(self) -> dict[str, Any]:
        """``{"property", "message", "evidence": {"op", "t"}}``: plain JSON."""
        return {
            "property": self.prop,
            "message": self.message,
            "evidence": {"op": self.op, "t": self.t},
        }

    @classmethod
    def from_json(cls, obj: Any) -> Violation:
        """The violation ``as_json`` wrote; ``ValueError`` for anything else."""
        if not isinstance(obj, dict) or not isinstance(obj.get("property"), str):
            raise ValueError(f"a violation is an object with a 'property', got {obj!r}")
        evidence = obj.get("evidence") or {}
        t = evidence.get("t")
        return cls(
            obj["property"],
            str(obj.get("message", "")),
            evidence.get("op"),
            None if t is None else float(t),
        )


Checker = Callable[[RunResult], list[Violation]]
