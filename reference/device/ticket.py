"""A restore in flight: its ``RestoreTicket`` (the fence and what the copy still reads)
and the pinned index buffer that ``TorchCopyEngine.enqueue`` fills and the copy reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kvfault.reference.types import OperationId


class _IndexBuffer:
    """Pinned int64 rows ``[5, cap]`` that one restore's enqueue fills and its copy
    reads: 0 source slots, 1 destination blocks, 2-4 scratch (the generations of a page
    list; for ``dma`` the destination and source addresses and the sizes). The gather
    kernel reads rows 0 and 1 in place across the bus (pinned memory is mapped), so no
    index upload is queued. Reused once the restore that last read it is complete."""

    __slots__ = ("cap", "host", "np", "ptr", "mapped", "event")

    ROWS = 5

    def __init__(self, cap: int):
        self.cap = cap
        self.host = torch.empty((self.ROWS, cap), dtype=torch.int64, pin_memory=True)
        self.np = self.host.numpy()  # the same pinned memory
        self.ptr = self.host.data_ptr()
        self.mapped: torch.Tensor | None = None  # device view, made on first need
        self.event: Any = None  # the fence of the restore that reads it; None: free

    def is_free(self) -> bool:
        if self.event is None:
            return True
        if self.event.query():
            self.event = None
            return True
        return False

    def row_ptr(self, row: int) -> int:
        return self.ptr + row * self.cap * 8


@dataclass(eq=False)
class RestoreTicket:
    """One enqueued restore. ``event`` is its fence; ``keep`` holds what the copy still
    reads (staging buffers, the pinned state) and ``index`` its index buffer, until the
    fence is observed."""

    op: OperationId
    req_id: str
    num_blocks: int
    nbytes: int
    event: Any
    state: torch.Tensor | None = None
    keep: list[Any] = field(default_factory=list)
    index: _IndexBuffer | None = None
    done: bool = False
