"""The offload stack: scheduler-side connector, restore worker, HBM pool, channels and
the engine step loop that drives them. Collaborators (tier, clock, copy engine, pages)
come in through the constructors; see ``kvfault.reference.interfaces``."""

from kvfault.reference.stack.completion_channel import QueueChannel
from kvfault.reference.stack.engine import (
    Collaborators,
    Engine,
    EngineConfig,
    EngineOutcome,
    ModelRunner,
)
from kvfault.reference.stack.hbm import BlockPool, OutOfBlocks, UncachedBlockPool
from kvfault.reference.stack.scheduler import Phase, Scheduler, SchedulerConfig
from kvfault.reference.stack.worker import RestoreWorker, page_digest

__all__ = [
    "BlockPool",
    "Collaborators",
    "Engine",
    "EngineConfig",
    "EngineOutcome",
    "ModelRunner",
    "OutOfBlocks",
    "Phase",
    "QueueChannel",
    "RestoreWorker",
    "Scheduler",
    "SchedulerConfig",
    "UncachedBlockPool",
    "page_digest",
]
