"""The reference offload stack: the executable specification kvfault tests against.

Layout: the vocabulary (``types``, ``interfaces``, ``errors``, ``trace``, ``clock``) at
the top; ``rules/`` (pure rules); ``stack/`` (scheduler, worker, engine, HBM,
channels); ``tiers/`` and ``device/`` (real adapters, optional dependencies imported
lazily). This package imports neither ``fakes`` nor ``faults``.

Importing this package imports none of its modules: each name below loads its module on
first use, so a part that needs one module (``reference.signals``) pays for that alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reference._lazy import lazy_exports

if TYPE_CHECKING:
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

_EXPORTS = {
    "EngineIdentityConflict": "reference.errors",
    "EngineStopped": "reference.errors",
    "LoadNotTerminal": "reference.errors",
    "RestoreFenceError": "reference.errors",
    "TransferUnprovable": "reference.errors",
    "Rules": "reference.rules",
    "Engine": "reference.stack",
    "EngineConfig": "reference.stack",
    "RunOutcome": "reference.stack",
    "Ev": "reference.trace",
    "Trace": "reference.trace",
    "TraceEvent": "reference.trace",
    "Completion": "reference.types",
    "Geometry": "reference.types",
    "LoadOp": "reference.types",
    "OperationId": "reference.types",
    "OpKind": "reference.types",
    "Outcome": "reference.types",
    "Request": "reference.types",
    "SaveOp": "reference.types",
    "StepMeta": "reference.types",
}
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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
