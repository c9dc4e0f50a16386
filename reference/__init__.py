"""The reference offload stack: the executable specification kvfault tests against.

Layout: the vocabulary (``types``, ``interfaces``, ``errors``, ``trace``, ``clock``) at
the top; ``rules/`` (pure rules); ``stack/`` (scheduler, worker, engine, HBM,
channels); ``tiers/`` and ``device/`` (real adapters, optional dependencies imported
lazily). This package imports neither ``fakes`` nor ``faults``.

Importing this package imports none of its modules: each name below loads its module on
first use, so a part that needs one module (``kvfault.reference.signals``) pays for that alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfault.reference._lazy import lazy_exports

if TYPE_CHECKING:
    from kvfault.reference.errors import (
        EngineIdentityConflict,
        EngineStopped,
        LoadNotTerminal,
        RestoreFenceError,
        TransferUnprovable,
    )
    from kvfault.reference.rules import Rules
    from kvfault.reference.stack import Engine, EngineConfig, EngineOutcome
    from kvfault.reference.trace import Ev, Trace, TraceEvent
    from kvfault.reference.types import (
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
    "EngineIdentityConflict": "kvfault.reference.errors",
    "EngineStopped": "kvfault.reference.errors",
    "LoadNotTerminal": "kvfault.reference.errors",
    "RestoreFenceError": "kvfault.reference.errors",
    "TransferUnprovable": "kvfault.reference.errors",
    "Rules": "kvfault.reference.rules",
    "Engine": "kvfault.reference.stack",
    "EngineConfig": "kvfault.reference.stack",
    "EngineOutcome": "kvfault.reference.stack",
    "Ev": "kvfault.reference.trace",
    "Trace": "kvfault.reference.trace",
    "TraceEvent": "kvfault.reference.trace",
    "Completion": "kvfault.reference.types",
    "Geometry": "kvfault.reference.types",
    "LoadOp": "kvfault.reference.types",
    "OperationId": "kvfault.reference.types",
    "OpKind": "kvfault.reference.types",
    "Outcome": "kvfault.reference.types",
    "Request": "kvfault.reference.types",
    "SaveOp": "kvfault.reference.types",
    "StepMeta": "kvfault.reference.types",
}
__all__ = [
    "Completion",
    "Engine",
    "EngineConfig",
    "EngineIdentityConflict",
    "EngineOutcome",
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
    "SaveOp",
    "StepMeta",
    "Trace",
    "TraceEvent",
    "TransferUnprovable",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
