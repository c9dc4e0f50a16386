"""Named errors that stop the engine. Each carries what a reviewer needs to see why."""

from __future__ import annotations

from reference.types import OperationId


class EngineStopped(RuntimeError):
    """The engine stopped itself on purpose (fail-stop), naming an operation."""

    def __init__(self, op: OperationId, elapsed: float, message: str):
        super().__init__(message)
        self.op = op
        self.elapsed = elapsed


class TransferUnprovable(EngineStopped):
    """Worker: a retrieve or restore copy did not finish within the transfer deadline."""

    def __init__(self, op: OperationId, elapsed: float, phase: str, deadline: float):
        super().__init__(
            op,
            elapsed,
            f"{op} {phase} is still not terminal after {elapsed:.3f}s "
            f"(transfer deadline {deadline:g}s)",
        )
        self.phase = phase


class LoadNotTerminal(EngineStopped):
    """Scheduler: a load was not reported terminal within its bound."""

    def __init__(self, op: OperationId, elapsed: float, bound: float):
        super().__init__(
            op,
            elapsed,
            f"{op} is still not terminal after {elapsed:.3f}s (load bound {bound:g}s)",
        )


class RestoreFenceError(RuntimeError):
    """The restore fence raised when a copy was being enqueued."""


class EngineIdentityConflict(RuntimeError):
    """Startup found the lookup socket path already served by a live server."""

    def __init__(self, path: str, engine_id: str):
        super().__init__(
            f"lookup socket {path} is already served by a live server; engine id "
            f"{engine_id!r} would share it (is data_parallel_base_port unresolved?)"
        )
        self.path = path
        self.engine_id = engine_id
