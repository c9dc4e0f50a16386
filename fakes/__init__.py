"""What surrounds the offload stack in a real engine, simulated deterministically:
a virtual clock, a deterministic model, an in-process LMCache-like tier, simulated
copies and pages, faker workloads, and ``SimWorld`` that assembles them."""

from kvfault.fakes.clock import VirtualClock
from kvfault.fakes.copy_engine import SimCopyEngine
from kvfault.fakes.kv_pages import SimKvPages
from kvfault.fakes.memory_tier import MemoryTier
from kvfault.fakes.model import ConstantForwardTimer, DeterministicModel
from kvfault.fakes.sim import SimWorld, no_wrap
from kvfault.fakes.workloads import Workload, Workloads, resend

__all__ = [
    "ConstantForwardTimer",
    "DeterministicModel",
    "MemoryTier",
    "SimCopyEngine",
    "SimKvPages",
    "SimWorld",
    "VirtualClock",
    "Workload",
    "Workloads",
    "no_wrap",
    "resend",
]
