"""Simulated HBM: one fingerprint per page and one state value per request."""

from __future__ import annotations

from kvfault.reference.interfaces import Page, State


class SimKvPages:
    """``num_blocks`` pages holding opaque contents (ints in simulation)."""

    def __init__(self, num_blocks: int):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self._pages: list[Page] = [None] * num_blocks
        self._states: dict[str, State] = {}
        # ``read`` and ``write`` are the page list's own item access: the same calls,
        # without a Python frame per page (a restore or a save touches dozens).
        self.read = self._pages.__getitem__  # type: ignore[method-assign,assignment]  # ints only
        self.write = self._pages.__setitem__  # type: ignore[method-assign,assignment]  # ints only

    def read(self, block: int) -> Page:
        return self._pages[block]

    def write(self, block: int, page: Page) -> None:
        self._pages[block] = page

    def read_state(self, req_id: str) -> State | None:
        return self._states.get(req_id)

    def write_state(self, req_id: str, state: State | None) -> None:
        if state is None:
            self._states.pop(req_id, None)
        else:
            self._states[req_id] = state
