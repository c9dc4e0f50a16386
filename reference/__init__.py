"""The reference offload stack: the executable specification kvfault tests against.

Layout: the vocabulary (``types``, ``interfaces``, ``errors``, ``trace``, ``clock``) at
the top; ``rules/`` (pure rules); ``stack/`` (scheduler, worker, engine, HBM,
channels); ``tiers/`` and ``device/`` (real adapters, optional dependencies imported
lazily). This package imports neither ``fakes`` nor ``faults``.
"""

from reference.errors import (
    EngineIdentityConflict,
    EngineStopped,
    LoadNotTerminal,
    RestoreFenceError,
    TransferUnprovable,
)
from reference.rules import Rules
from reference.stack import Engine, EngineConfig, RunOutcome
from reference.trace import Ev, Trace, TraceEvent
from reference.types import (
    Completion,
    Geometry,
    LoadOp,
    OperationId,
    OpKind,
    Outcome,
    Request,
    SaveOp,
    StepMeta,
)

__all__ = [
    "Completion",
    "Engine",
    "EngineConfig",
    "EngineIdentityConflict",
    "EngineStopped",
    "Ev",
    "Geometry",
    "LoadNotTerminal",
    "LoadOp",
    "OpKind",
    "OperationId",
    "Outcome",
    "Request",
    "RestoreFenceError",
    "Rules",
    "RunOutcome",
    "SaveOp",
    "StepMeta",
    "Trace",
    "TraceEvent",
    "TransferUnprovable",
]
