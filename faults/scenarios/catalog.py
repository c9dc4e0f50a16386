"""Every scenario by name, built here and nowhere else: the simulated stories, the
generated workloads and the real-tier sizes. Each ``Scenario`` says which tiers it runs on."""

from __future__ import annotations

from faults.scenarios.generated import GENERATED
from faults.scenarios.real_sized import REAL_SIZED
from faults.scenarios.scenario import Scenario
from faults.scenarios.simulated import SIMULATED

SCENARIOS: dict[str, Scenario] = {**SIMULATED, **GENERATED, **REAL_SIZED}
