"""Every scenario by name, built here and nowhere else: the simulated stories, the
generated workloads and the real-tier sizes. Each tier's catalog lists those it runs
(``kvfault.faults.tiers.Tier.catalog``)."""

from __future__ import annotations

from kvfault.faults.scenarios.generated import GENERATED
from kvfault.faults.scenarios.real_sized import REAL_SIZED
from kvfault.faults.scenarios.scenario import Scenario
from kvfault.faults.scenarios.simulated import SIMULATED

SCENARIOS: dict[str, Scenario] = {**SIMULATED, **GENERATED, **REAL_SIZED}
