"""The ``memory`` tier's executor and opener: the shared scenarios
(``kvfault.faults.scenarios.SCENARIOS``) run in this process, in virtual time."""

from __future__ import annotations

from kvfault.faults.runs import RunContext, RunResult
from kvfault.faults.scenarios import SCENARIOS
from kvfault.faults.tiers import Executor

NAME = "memory"


class MemoryExecutor(Executor):
    """The in-process tier (``kvfault.fakes.memory_tier``) in virtual time: deterministic."""

    tier = NAME
    deterministic = True

    def execute(self, scenario: str, ctx: RunContext) -> tuple[RunResult, dict[str, object]]:
        return SCENARIOS[scenario].run(ctx), {}
