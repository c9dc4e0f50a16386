"""The ``memory`` tier's faults: the in-process injectors of
``kvfault.faults.injectors.catalog.INJECTORS``, each run as a one-fault plan with its default
parameters (the tier's ``FaultPlans``)."""

from __future__ import annotations

from collections.abc import Sequence

from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.injectors.plans import FaultPlan, FaultSpec, swarm_plan
from kvfault.faults.runs import Expect


class InjectorPlans:
    """One injector of ``INJECTORS`` as a plan, the ending its entry declares, and a
    swarm's draw of them (``kvfault.faults.injectors.plans.swarm_plan``)."""

    def plan(self, fault: str, seed: int, scale: int) -> FaultPlan:
        spec = FaultSpec.of(fault, **INJECTORS[fault].defaults)
        return FaultPlan((spec,), seed, scale)

    def expect(self, fault: str) -> Expect | None:
        return INJECTORS[fault].expect

    def faults(self) -> Sequence[str]:
        return tuple(INJECTORS)

    def swarm(self, seed: int, scenario: str, pinned: Sequence[str]) -> FaultPlan:
        return swarm_plan(seed, pinned=tuple(pinned) or None, scenario=scenario)


PLANS = InjectorPlans()
