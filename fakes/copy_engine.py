"""Simulated restore copies: latency plus bytes over bandwidth, in virtual time."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from kvfault.reference.interfaces import Clock, KvPages, Page, State
from kvfault.reference.types import OperationId


@dataclass
class SimCopy:
    op: OperationId
    done_at: float
    pages: list[Page]
    blocks: list[int]
    state: State | None
    req_id: str
    applied: bool = field(default=False)


class SimCopyEngine:
    """Copies land in ``kv`` when a poll first sees them complete."""

    def __init__(
        self,
        clock: Clock,
        kv: KvPages,
        latency_s: float = 1e-3,
        bandwidth_bytes_s: float = 50e9,
        page_bytes: int = 64 * 1024,
    ):
        self.clock = clock
        self.kv = kv
        self.latency_s = latency_s
        self.bandwidth_bytes_s = bandwidth_bytes_s
        self.page_bytes = page_bytes

    def enqueue(
        self,
        op: OperationId,
        pages: Sequence[Page],
        blocks: Sequence[int],
        state: State | None,
        req_id: str,
    ) -> SimCopy:
        if len(pages) != len(blocks):
            raise ValueError(f"{op}: {len(pages)} pages for {len(blocks)} blocks")
        cost = self.latency_s + len(pages) * self.page_bytes / self.bandwidth_bytes_s
        return SimCopy(op, self.clock.now() + cost, list(pages), list(blocks), state, req_id)

    def is_complete(self, ticket: object) -> bool:
        assert isinstance(ticket, SimCopy)
        if self.clock.now() < ticket.done_at:
            return False
        if not ticket.applied:
            # Every page written, in C (the lengths were checked at enqueue).
            deque(map(self.kv.write, ticket.blocks, ticket.pages), maxlen=0)
            if ticket.state is not None:
                self.kv.write_state(ticket.req_id, ticket.state)
            ticket.applied = True
        return True
