"""The ``memory`` tier's faults: the in-process injectors of
``kvfault.faults.injectors.catalog.INJECTORS``, each run as a one-fault plan with its default
parameters (the tier's ``FaultPlans``)."""

from __future__ import annotations

from kvfault.faults.injectors.catalog import INJECTORS
from kvfault.faults.injectors.plans import FaultPlan, FaultSpec
from kvfault.faults.runs import Expect


class InjectorPlans:
    """One injector of ``INJECTORS`` as a plan, and the ending its entry declares."""

    def plan(self, fault: str, seed: int, scale: int) -> FaultPlan:
        spec = FaultSpec.of(fault, **INJECTORS[fault].defaults)
        return FaultPlan((spec,), seed, scale)

    def expect(self, fault: str) -> Expect | None:
        return INJECTORS[fault].expect


PLANS = InjectorPlans()
