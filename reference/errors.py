"""Named errors that stop the engine. Each carries what a reviewer needs to see why.

A run's result holds the error its engine stopped with, and a campaign worker sends
that result to its parent process: every error here survives a pickle round trip
(``RebuiltWhenUnpickled``), whatever its ``__init__`` takes."""

from __future__ import annotations

from typing import Any, cast

from kvfault.reference.types import OperationId


def rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An instance of the error class ``cls`` with ``args`` and the attributes ``state``,
    made without calling its ``__init__`` (what unpickling ``RebuiltWhenUnpickled`` calls)."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class RebuiltWhenUnpickled:
    """Mixin for an error whose ``__init__`` takes other arguments than its message.

    Pickle rebuilds an error by calling ``cls(*exc.args)``, and ``args`` holds the
    message, so such an error fails to unpickle in the process that receives it. This
    one pickles as its class, ``args`` and attributes, and comes back equal to them."""

    def __reduce__(self) -> tuple[Any, ...]:
        exc = cast(BaseException, self)  # a mixin of error classes only
        return (rebuilt, (type(exc), exc.args, dict(vars(exc))))


class EngineStopped(RebuiltWhenUnpickled, RuntimeError):
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
        self.deadline = deadline


class LoadNotTerminal(EngineStopped):
    """Scheduler: a load was not reported terminal within its bound."""

    def __init__(self, op: OperationId, elapsed: float, bound: float):
        super().__init__(
            op,
            elapsed,
            f"{op} is still not terminal after {elapsed:.3f}s (load bound {bound:g}s)",
        )
        self.bound = bound


class RestoreFenceError(RuntimeError):
    """The restore fence raised when a copy was being enqueued."""


class EngineIdentityConflict(RebuiltWhenUnpickled, RuntimeError):
    """Startup found the lookup socket path already served by a live server."""

    def __init__(self, path: str, engine_id: str):
        super().__init__(
            f"lookup socket {path} is already served by a live server; engine id "
            f"{engine_id!r} would share it (is data_parallel_base_port unresolved?)"
        )
        self.path = path
        self.engine_id = engine_id
